"""A saga that spans requests: suspended by one transaction, resumed by id in another process
(another kit on the same home), read back from the log; recovery, certify and the history
views treat a suspended saga as waiting, not abandoned."""

from __future__ import annotations

import contextvars
import threading
from pathlib import Path
from typing import Any

import pytest
from agent_saga import (
    AgentKit,
    CompensatorRegistry,
    ConfigurationError,
    Entry,
    FakeClock,
    ResumeError,
    SagaEndedError,
    SagaRolledBack,
    SagaStatus,
    build_history,
    tool,
)
from agent_saga.proofs._certify import CRITICAL, WARNING, certify_records
from agent_saga.testing import Ledger

LEDGER = Ledger()
REGISTRY = CompensatorRegistry()


@REGISTRY.compensator("resume.refund")
def refund(result: str) -> None:
    LEDGER.record(f"refund {result}")


@REGISTRY.compensator("resume.cancel")
def cancel(result: str) -> None:
    LEDGER.record(f"cancel {result}")


@tool(name="resume.charge", compensate="resume.refund")
def charge(cents: int) -> str:
    LEDGER.record(f"charge {cents}")
    return f"ch_{cents}"


@tool(name="resume.book", compensate="resume.cancel")
def book(hotel: str) -> str:
    LEDGER.record(f"book {hotel}")
    return f"bk_{hotel}"


@pytest.fixture(autouse=True)
def _fresh_ledger() -> None:
    global LEDGER  # noqa: PLW0603 - the module's tools and compensators record into it
    LEDGER = Ledger()


def open_kit(home: Path, clock: FakeClock | None = None) -> AgentKit:
    return AgentKit(home=home, registry=REGISTRY, clock=clock)


def suspend_after_charge(home: Path, **suspend: Any) -> str:
    with open_kit(home) as first, first.transaction("order") as saga:
        charge(100)
        saga.suspend(**suspend)
    return saga.id


def test_a_failure_after_resume_compensates_both_requests_newest_first(home: Path) -> None:
    saga_id = suspend_after_charge(home)
    with open_kit(home) as second:
        with pytest.raises(SagaRolledBack) as raised, second.transaction(resume=saga_id) as saga:
            assert saga.id == saga_id
            book("Ritz")
            raise RuntimeError("payment declined")
        views = build_history(second.store.records()).sagas
    assert LEDGER.actions() == ["charge 100", "book Ritz", "cancel bk_Ritz", "refund ch_100"]
    assert [r.ordinal for r in raised.value.report.compensated] == [2, 1]
    [view] = views
    assert view.status is SagaStatus.ROLLED_BACK
    assert [s.ordinal for s in view.steps] == [1, 2]


def test_a_resumed_saga_commits_and_keeps_counting(home: Path) -> None:
    saga_id = suspend_after_charge(home)
    with open_kit(home) as second:
        with second.transaction(resume=saga_id):
            book("Ritz")
        assert second.verify().ok
        records = [r for r in second.store.records() if r.saga == saga_id]
    kinds = [r.kind for r in records]
    assert kinds[-1] == "saga.end"
    assert kinds.count("saga.suspended") == kinds.count("saga.resumed") == 1
    assert records[-1].data["status"] == "committed"
    assert records[-1].data["records"] == len(records) - 1
    assert [r.data["ordinal"] for r in records if r.kind == "step.intent"] == [1, 2]


def test_a_suspended_saga_is_waiting_for_history_recovery_and_certify(home: Path) -> None:
    saga_id = suspend_after_charge(home)
    with open_kit(home) as other:
        [view] = build_history(other.store.records()).sagas
        assert view.status is SagaStatus.SUSPENDED
        assert view.owner is None
        report = other.recover()
        assert report.suspended == (saga_id,)
        assert report.recovered == ()
        records = list(other.store.records())
    findings = certify_records(records, other.verify(), None, lambda owner: False)
    assert [(f.severity, f.check) for f in findings] == [(WARNING, "suspended")]
    assert LEDGER.actions() == ["charge 100"]


def test_an_expired_suspension_is_rolled_back_by_recovery(home: Path) -> None:
    clock = FakeClock()
    with open_kit(home, clock) as first, first.transaction("order") as saga:
        charge(100)
        saga.suspend(expires_after=60)
    with open_kit(home, clock) as other:
        clock.advance(61)
        records = list(other.store.records())
        findings = certify_records(records, other.verify(), None, lambda o: False, clock.now())
        assert [(f.severity, f.check) for f in findings] == [
            (CRITICAL, "suspension_expired"),
            (CRITICAL, "uncompensated_effect"),
        ]
        with pytest.raises(ResumeError, match="expired"), other.transaction(resume=saga.id):
            pass
        report = other.recover()
        assert [r.saga_id for r in report.recovered] == [saga.id]
    assert LEDGER.actions() == ["charge 100", "refund ch_100"]


def test_resuming_what_cannot_be_resumed_is_a_clear_error(home: Path) -> None:
    with open_kit(home) as kit:
        with pytest.raises(ResumeError, match="no saga 'nope'"), kit.transaction(resume="nope"):
            pass
        with kit.transaction("done") as ended:
            charge(1)
        gone = kit.transaction(resume=ended.id)
        with pytest.raises(ResumeError, match=r"has ended \(committed\)"), gone:
            pass
        errors: list[BaseException] = []

        def another_request(saga_id: str) -> None:  # a thread starts with no saga of its own
            try:
                with kit.transaction(resume=saga_id):
                    pass
            except ResumeError as exc:
                errors.append(exc)

        with kit.transaction("live") as live:
            charge(2)  # durable: the saga is in the log
            request = threading.Thread(target=another_request, args=(live.id,))
            request.start()
            request.join(10)
        assert "running elsewhere" in str(errors[0])
    suspended = suspend_after_charge(home)
    with open_kit(home) as kit:
        with kit.transaction(resume=suspended):
            pass
        with pytest.raises(ResumeError, match="has ended"), kit.transaction(resume=suspended):
            pass
        with pytest.raises(ConfigurationError, match="resume= takes a saga id"):
            kit.transaction(resume="")


def test_a_saga_with_an_in_process_compensation_cannot_be_suspended(home: Path) -> None:
    @tool(name="resume.local", compensate=lambda: LEDGER.record("undo"))
    def local() -> str:
        LEDGER.record("local")
        return "x"

    kit = open_kit(home)
    with kit, pytest.raises(SagaRolledBack) as raised, kit.transaction() as saga:
        local()
        saga.suspend()
    assert isinstance(raised.value.cause, ConfigurationError)
    assert "in-process callable" in str(raised.value.cause)
    assert LEDGER.actions() == ["local", "undo"]  # the refusal rolled it back


def test_a_doomed_or_failing_block_rolls_back_instead_of_suspending(home: Path) -> None:
    with open_kit(home) as kit:
        with pytest.raises(SagaRolledBack), kit.transaction() as saga:
            charge(5)
            saga.suspend()
            raise RuntimeError("request failed")
        statuses = [v.status for v in build_history(kit.store.records()).sagas]
    assert statuses == [SagaStatus.ROLLED_BACK]
    assert LEDGER.actions() == ["charge 5", "refund ch_5"]


def test_a_suspended_saga_takes_no_more_steps_in_its_first_process(home: Path) -> None:
    with open_kit(home) as kit:
        with kit.transaction() as saga:
            saga.suspend()
            inside = contextvars.copy_context()  # as a task started in the block keeps it
        with pytest.raises(SagaEndedError, match="has been suspended"):
            inside.run(charge, 1)
    assert LEDGER.actions() == []


def test_a_record_after_the_end_is_critical(home: Path) -> None:
    with open_kit(home) as kit:
        with kit.transaction("short") as saga:
            charge(1)
        kit.store.append(
            [Entry("step.done", saga.id, {"ordinal": 2, "tool": "late", "result": None}, 0)],
            sync=True,
        )
        records = list(kit.store.records())
        findings = certify_records(records, kit.verify(), None, lambda o: False)
    assert [(f.severity, f.check) for f in findings] == [(CRITICAL, "after_end")]
    assert "after its end" in findings[0].message
