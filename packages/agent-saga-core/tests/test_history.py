"""The read-only saga history: views rebuilt from real engine records, and odd input."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from agent_saga import (
    AgentKit,
    FakeClock,
    GateRefused,
    HaltedError,
    Kind,
    MaxValue,
    MemoryKillSwitch,
    Record,
    SagaRolledBack,
    SagaStatus,
    SequentialIds,
    compensator,
    tool,
)
from agent_saga._history.build import (
    AmbiguousSagaError,
    CompensationState,
    ErrorInfo,
    SagaView,
    StepOutcome,
    UnknownSagaError,
    build_history,
    sagas,
)
from agent_saga._history.lookup import find_saga

CALLS: dict[str, int] = {"charge": 0, "refund": 0, "ship": 0, "unship": 0}


@compensator("test_history.refund")
def _refund(result: dict[str, Any]) -> None:
    CALLS["refund"] += 1


@compensator("test_history.unship")
def _unship(result: str) -> None:
    CALLS["unship"] += 1
    raise RuntimeError("warehouse offline")


@tool(name="test_history.charge", semantics="compensable", compensate="test_history.refund")
def charge(amount: float, idempotency_key: str = "") -> dict[str, Any]:
    CALLS["charge"] += 1
    return {"charged": amount}


@tool(name="test_history.ship", semantics="compensable", compensate="test_history.unship")
def ship(item: str) -> str:
    CALLS["ship"] += 1
    return f"parcel-{item}"


@tool(name="test_history.note", semantics="reversible")
def note(text: str) -> str:
    return text


@tool(name="test_history.explode", semantics="reversible")
def explode(why: str) -> None:
    raise ValueError(why)


@pytest.fixture
def kit() -> Iterator[AgentKit]:
    with AgentKit(
        store="memory",
        clock=FakeClock(),
        ids=SequentialIds("s"),
        kill_switch=MemoryKillSwitch(),
        rules=[MaxValue(100, tools=frozenset({"test_history.charge"}))],
    ) as kit:
        yield kit


def _records(kit: AgentKit) -> list[Record]:
    return list(kit.store.records())


def _rolled_back_saga(kit: AgentKit) -> str:
    """Charge, a refused over-cap charge, a note, then a failing step: rollback."""
    with pytest.raises(SagaRolledBack) as info, kit.transaction("order") as saga:
        charge(40)
        with pytest.raises(GateRefused):
            charge(4000)
        note("hello")
        explode("boom")
    assert info.value.saga_id == saga.id
    return saga.id


def test_committed_saga_view() -> None:
    with AgentKit(store="memory", clock=FakeClock(), ids=SequentialIds("c")) as kit:
        with kit.transaction("pay"):
            charge(10)
        (view,) = sagas(_records(kit))
    assert (view.id, view.name, view.status) == ("c-0001", "pay", SagaStatus.COMMITTED)
    assert view.ended is not None
    assert view.started == 1_700_000_000_000
    assert isinstance(view.pid, int)
    assert view.host
    assert view.cause is None
    (step,) = view.steps
    assert step.outcome is StepOutcome.DONE
    assert step.result == {"charged": 10}
    assert step.args == {"amount": 10}
    assert step.semantics == "compensable"
    assert step.compensation == "test_history.refund"
    assert step.compensation_recoverable is True
    assert step.idempotency_key is not None
    assert step.idempotency_key.startswith("as1-")
    assert step.compensation_state is CompensationState.NOT_NEEDED
    assert view.rollbacks == ()


def test_rolled_back_saga_shows_refusal_failure_and_compensation(kit: AgentKit) -> None:
    saga_id = _rolled_back_saga(kit)
    refunds_before = CALLS["refund"]
    (view,) = sagas(_records(kit))
    assert CALLS["refund"] == refunds_before  # rebuilding history calls nothing
    assert view.id == saga_id
    assert view.status is SagaStatus.ROLLED_BACK
    assert view.cause == ErrorInfo("ValueError", "boom")
    assert [(s.ordinal, s.tool, s.outcome) for s in view.steps] == [
        (1, "test_history.charge", StepOutcome.DONE),
        (2, "test_history.charge", StepOutcome.REFUSED),
        (3, "test_history.note", StepOutcome.DONE),
        (4, "test_history.explode", StepOutcome.FAILED),
    ]
    charged, refused, noted, failed = view.steps
    assert charged.compensation_state is CompensationState.COMPENSATED
    assert refused.refusal is not None
    assert refused.refusal.rule == "max_value"
    assert "exceeds the cap" in refused.refusal.reason
    assert refused.args == {"amount": 4000}
    assert refused.compensation_state is CompensationState.NOT_NEEDED
    # the refusal (no intent record) carries the design that was called
    assert (refused.semantics, refused.compensation) == ("compensable", "test_history.refund")
    (refusal,) = [r for r in _records(kit) if r.kind == Kind.GATE_REFUSED]
    assert refusal.data["semantics"] == "compensable"
    assert view.refusals == (refused,)
    assert noted.compensation_state is CompensationState.NOT_NEEDED
    assert failed.error == ErrorInfo("ValueError", "boom")
    assert failed.compensation_state is CompensationState.NOT_NEEDED
    (rollback,) = view.rollbacks
    assert rollback.terminal
    assert rollback.finished
    assert rollback.compensated == (1,)
    assert rollback.cause == ErrorInfo("ValueError", "boom")


def test_failed_compensation_needs_a_human(kit: AgentKit) -> None:
    with pytest.raises(SagaRolledBack), kit.transaction("ship-and-charge"):
        ship("book")
        charge(5)
        explode("late")
    (view,) = sagas(_records(kit))
    assert view.status is SagaStatus.NEEDS_HUMAN
    shipped, charged, _ = view.steps
    assert shipped.compensation_state is CompensationState.FAILED
    assert shipped.compensation_error == ErrorInfo("RuntimeError", "warehouse offline")
    assert charged.compensation_state is CompensationState.COMPENSATED
    (rollback,) = view.rollbacks
    assert rollback.compensated == (2,)
    assert rollback.failed == (1,)


def test_saga_cut_short_is_running_with_unknown_and_pending_steps(kit: AgentKit) -> None:
    with pytest.raises(SagaRolledBack), kit.transaction("crashy"):
        charge(7)
        ship("lamp")
        explode("x")
    records = _records(kit)
    # The log as a process that died during ship() would have left it: up to ship's intent.
    cut = next(
        i
        for i, r in enumerate(records)
        if r.kind == Kind.STEP_INTENT and r.data.get("tool") == "test_history.ship"
    )
    (view,) = sagas(records[: cut + 1])
    assert view.status is SagaStatus.RUNNING
    assert view.ended is None
    charged, shipped = view.steps
    assert charged.outcome is StepOutcome.DONE
    assert charged.compensation_state is CompensationState.PENDING
    assert shipped.outcome is StepOutcome.UNKNOWN
    assert shipped.compensation_state is CompensationState.PENDING
    # Cut inside the rollback: the cause comes from the unfinished rollback.begin.
    begin = next(i for i, r in enumerate(records) if r.kind == Kind.ROLLBACK_BEGIN)
    (midway,) = sagas(records[: begin + 2])
    assert midway.status is SagaStatus.RUNNING
    assert midway.cause == ErrorInfo("ValueError", "x")
    assert midway.rollbacks[0].finished is False
    assert midway.steps[1].compensation_state is CompensationState.STARTED


def test_savepoint_rollback_then_commit(kit: AgentKit) -> None:
    with kit.transaction("outer"):
        note("kept")
        with pytest.raises(SagaRolledBack), kit.transaction("inner"):
            charge(3)
            explode("inner failure")
        note("after")
    (view,) = sagas(_records(kit))
    assert view.status is SagaStatus.COMMITTED
    (savepoint,) = view.savepoint_rollbacks
    assert savepoint.from_ordinal == 2
    assert savepoint.compensated == (2,)
    assert savepoint.cause == ErrorInfo("ValueError", "inner failure")
    assert view.steps[1].compensation_state is CompensationState.COMPENSATED
    assert view.cause is None


def test_saga_less_events_halt_refused_start_resume(kit: AgentKit) -> None:
    kit.halt("incident 42")
    with pytest.raises(HaltedError), kit.transaction("blocked"):
        pass
    kit.resume()
    history = build_history(_records(kit))
    assert history.sagas == ()
    assert [(e.kind, e.reason, e.rule, e.saga_name) for e in history.events] == [
        ("control.halt", "incident 42", None, None),
        ("gate.refused", "incident 42", "kill_switch", "blocked"),
        ("control.resume", None, None, None),
    ]
    assert history.records == 3


def test_halt_mid_saga_is_a_refused_step(kit: AgentKit) -> None:
    with pytest.raises(SagaRolledBack) as info, kit.transaction("interrupted"):
        charge(1)
        kit.halt("stop now")
        charge(2)
    assert isinstance(info.value.cause, HaltedError)
    (view,) = sagas(_records(kit))
    refused = view.steps[1]
    assert refused.outcome is StepOutcome.REFUSED
    assert refused.refusal is not None
    assert refused.refusal.rule == "kill_switch"
    assert view.steps[0].compensation_state is CompensationState.COMPENSATED


def _view(saga_id: str) -> SagaView:
    return SagaView(saga_id, "n", SagaStatus.COMMITTED, 0, None, None, None, None, ())


def test_find_saga_exact_prefix_unknown_ambiguous() -> None:
    views = [_view("saga-1"), _view("saga-10"), _view("saga-11"), _view("other")]
    assert find_saga(views, "saga-1").id == "saga-1"  # exact beats prefix
    assert find_saga(views, "ot").id == "other"
    assert find_saga(views, " other ").id == "other"
    with pytest.raises(UnknownSagaError, match="no saga matches 'nope'"):
        find_saga(views, "nope")
    with pytest.raises(UnknownSagaError):
        find_saga(views, "  ")
    with pytest.raises(AmbiguousSagaError) as info:
        find_saga(views, "saga")
    assert info.value.candidates == ("saga-1", "saga-10", "saga-11")
    assert "saga-1, saga-10, saga-11" in str(info.value)
    assert "\n" not in str(info.value)


def test_find_saga_by_uuid_prefix_with_or_without_dashes() -> None:
    first = "0193b5e2-7c1a-7d3e-9f2c-4b8a1e6d0c55"
    second = "0193b5e2-7c1b-7000-8000-000000000001"
    views = [_view(first), _view(second), _view("20261201T121407-0254ae8a00ce3655")]
    assert find_saga(views, "0193b5e2-7c1a").id == first
    assert find_saga(views, "0193b5e27c1a").id == first
    assert find_saga(views, "0193B5E27C1B").id == second
    assert find_saga(views, first.replace("-", "")).id == first  # a whole id without dashes
    assert find_saga(views, "20261201T1214").id.startswith("20261201T121407")
    with pytest.raises(AmbiguousSagaError) as info:
        find_saga(views, "0193b5e2-7c1")
    assert info.value.candidates == (first, second)
    with pytest.raises(UnknownSagaError):
        find_saga(views, "0193b5e2-7c1c")


def _rec(seq: int, kind: str, saga: str | None, data: dict[str, Any]) -> Record:
    return Record(seq, 1000 * seq, kind, saga, data, "0" * 64, "0" * 64)


def test_odd_records_never_raise_and_unknown_kinds_are_listed() -> None:
    records = [
        _rec(1, "step.intent", "x", {"ordinal": "one", "tool": 5}),
        _rec(2, "step.done", "x", {"ordinal": 1}),
        _rec(3, "step.failed", "x", {"ordinal": 2, "tool": "t", "error": "not an object"}),
        _rec(4, "recovery.claimed", "x", {}),
        _rec(5, "saga.end", "x", {"status": "exploded", "cause": []}),
        _rec(6, "gate.refused", "x", {"ordinal": True}),
        _rec(7, "mystery", None, {"a": 1}),
    ]
    history = build_history(records)
    (view,) = history.sagas
    assert view.name == "?"
    assert view.status is SagaStatus.NEEDS_HUMAN  # an end record nobody can interpret
    assert [(s.ordinal, s.tool, s.outcome) for s in view.steps] == [
        (1, "?", StepOutcome.DONE),
        (2, "t", StepOutcome.FAILED),
    ]
    assert view.steps[1].error is None
    assert view.unknown_kinds == ("recovery.claimed",)
    assert (view.first_seq, view.last_seq, view.record_count) == (1, 6, 6)
    assert [e.kind for e in history.events] == ["mystery"]
