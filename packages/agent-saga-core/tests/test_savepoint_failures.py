"""A compensation that failed in a savepoint still makes the saga's rollback need a human.

Found by the pytest plugin's chaos runner: an agent whose own ``saga_scope`` ran as a savepoint
inside the runner's transaction lost a failed compensation from the saga's terminal record,
which said ``rolled_back`` while the exception's report said ``needs_human``. The log is what
recovery and ``certify`` read, so it must say what the report says.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pytest
from agent_saga import AgentKit, SagaRolledBack, SagaStatus, build_history


def tools(kit: AgentKit, undone: list[str]) -> tuple[Callable[[], None], Callable[[str], None]]:
    def undo_fails() -> None:
        raise ConnectionError("refund API down")

    def undo(name: str) -> None:
        undone.append(name)

    @kit.tool(name="sp.charge", compensate=undo_fails)
    def charge() -> None:
        pass

    @kit.tool(name="sp.book", compensate=undo)
    def book(name: str) -> None:
        pass

    return charge, book


def terminal(kit: AgentKit) -> Mapping[str, object]:
    (end,) = [r.data for r in kit.store.records() if r.kind == "saga.end"]
    return end


def test_a_failed_savepoint_compensation_propagating_out_needs_a_human(kit: AgentKit) -> None:
    undone: list[str] = []
    charge, book = tools(kit, undone)
    with pytest.raises(SagaRolledBack) as caught, kit.transaction("outer"):
        book("hotel")
        with kit.transaction("inner"):
            charge()
            raise ValueError("inner fails")
    assert caught.value.report.status is SagaStatus.NEEDS_HUMAN
    end = terminal(kit)
    assert end["status"] == "needs_human"
    assert end["failed"] == [2]
    assert undone == ["hotel"]
    (view,) = build_history(kit.store.records()).sagas
    assert view.status is SagaStatus.NEEDS_HUMAN


def test_a_caught_savepoint_failure_still_marks_a_later_rollback(kit: AgentKit) -> None:
    undone: list[str] = []
    charge, book = tools(kit, undone)
    with pytest.raises(SagaRolledBack) as caught, kit.transaction("outer"):
        try:
            with kit.transaction("inner"):
                charge()
                raise ValueError("inner fails")
        except SagaRolledBack:
            pass  # the agent carries on
        book("hotel")
        raise RuntimeError("outer fails later")
    assert caught.value.report.status is SagaStatus.NEEDS_HUMAN
    assert terminal(kit)["status"] == "needs_human"
    assert undone == ["hotel"]


def test_savepoint_compensations_that_succeed_leave_the_saga_rolled_back(kit: AgentKit) -> None:
    undone: list[str] = []
    _, book = tools(kit, undone)
    with pytest.raises(SagaRolledBack) as caught, kit.transaction("outer"):
        book("a")
        with kit.transaction("inner"):
            book("b")
            raise ValueError("inner fails")
    assert caught.value.report.status is SagaStatus.ROLLED_BACK
    assert terminal(kit)["status"] == "rolled_back"
    assert undone == ["b", "a"]
