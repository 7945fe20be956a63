"""Observers: the events of a saga in order, refusals, a raising observer, the records' trace."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest
from agent_saga import (
    AgentKit,
    DenyTools,
    GateRefused,
    Observer,
    Saga,
    SagaRolledBack,
    Semantics,
    SequentialIds,
    StepRef,
)
from agent_saga._approvals.request import ApprovalRequest
from agent_saga._approvals.votes import submit_vote
from agent_saga._approvals.wait import Approvals


class Recorder(Observer):
    """Keeps every event as a tuple, and reports a fake trace context for the records."""

    def __init__(self) -> None:
        self.events: list[tuple[object, ...]] = []
        self.span = "0"

    def saga_begin(self, saga: Saga) -> None:
        self.events.append(("saga_begin", saga.name))

    def saga_end(self, saga: Saga, error: BaseException | None) -> None:
        self.events.append(("saga_end", saga.status.value, type(error).__name__))

    def step_begin(self, saga: Saga, step: StepRef, semantics: Semantics) -> None:
        self.span = f"step-{step.ordinal}"
        self.events.append(("step_begin", step.ordinal, step.tool, semantics.value))

    def step_end(self, saga: Saga, step: StepRef, error: BaseException | None) -> None:
        self.events.append(("step_end", step.ordinal, type(error).__name__))

    def gate_refused(self, saga: Saga, step: StepRef, rule: str, reason: str) -> None:
        self.events.append(("gate_refused", step.ordinal, rule))

    def compensation_begin(self, saga: Saga, step: StepRef) -> None:
        self.span = f"undo-{step.ordinal}"
        self.events.append(("compensation_begin", step.ordinal))

    def compensation_end(self, saga: Saga, step: StepRef, error: BaseException | None) -> None:
        self.events.append(("compensation_end", step.ordinal, type(error).__name__))

    def approval_requested(self, saga: Saga, step: StepRef, reason: str) -> None:
        self.events.append(("approval_requested", step.ordinal, step.tool))

    def approval_decided(
        self, saga: Saga, step: StepRef, outcome: str, approvers: tuple[str, ...]
    ) -> None:
        self.events.append(("approval_decided", step.ordinal, outcome, approvers))

    def trace_ids(self) -> Mapping[str, str] | None:
        return {"trace_id": "t1", "span_id": self.span}


class Broken(Observer):
    """Raises from every event."""

    def _fail(self, *args: object) -> None:
        raise RuntimeError("observer bug")

    saga_begin = saga_end = step_begin = step_end = gate_refused = _fail  # type: ignore[assignment]
    compensation_begin = compensation_end = _fail  # type: ignore[assignment]

    def trace_ids(self) -> Mapping[str, str] | None:
        raise RuntimeError("observer bug")


def three_steps(kit: AgentKit, undone: list[str]) -> None:
    @kit.tool(name="book", compensate=lambda: undone.append("book"))
    def book() -> str:
        return "booked"

    @kit.tool(name="charge", compensate=lambda: undone.append("charge"))
    def charge() -> str:
        return "charged"

    @kit.tool(name="ship", semantics="compensable", compensate=lambda: undone.append("ship"))
    def ship() -> str:
        raise RuntimeError("no courier")

    with kit.transaction("order"):
        book()
        charge()
        ship()


def test_a_failing_saga_tells_every_event_in_order(kit: AgentKit) -> None:
    recorder = kit.observe(Recorder())
    undone: list[str] = []
    with pytest.raises(SagaRolledBack):
        three_steps(kit, undone)
    assert isinstance(recorder, Recorder)
    assert recorder.events == [
        ("saga_begin", "order"),
        ("step_begin", 1, "book", "compensable"),
        ("step_end", 1, "NoneType"),
        ("step_begin", 2, "charge", "compensable"),
        ("step_end", 2, "NoneType"),
        ("step_begin", 3, "ship", "compensable"),
        ("step_end", 3, "RuntimeError"),
        ("compensation_begin", 2),
        ("compensation_end", 2, "NoneType"),
        ("compensation_begin", 1),
        ("compensation_end", 1, "NoneType"),
        ("saga_end", "rolled_back", "RuntimeError"),
    ]
    assert undone == ["charge", "book"]


def test_records_keep_the_trace_context_of_the_step_that_wrote_them(kit: AgentKit) -> None:
    kit.observe(Recorder())
    with pytest.raises(SagaRolledBack):
        three_steps(kit, [])
    traced = {
        (r.kind, r.data.get("ordinal")): r.data["trace"]
        for r in kit.store.records()
        if r.kind != "saga.begin"
    }
    assert traced[("step.intent", 3)] == {"trace_id": "t1", "span_id": "step-3"}
    assert traced[("step.done", 1)] == {"trace_id": "t1", "span_id": "step-1"}
    assert traced[("step.failed", 3)] == {"trace_id": "t1", "span_id": "step-3"}
    assert traced[("compensation.intent", 1)] == {"trace_id": "t1", "span_id": "undo-1"}
    assert traced[("compensation.done", 2)] == {"trace_id": "t1", "span_id": "undo-2"}


def test_no_trace_field_without_observers(kit: AgentKit) -> None:
    with pytest.raises(SagaRolledBack):
        three_steps(kit, [])
    assert [r for r in kit.store.records() if "trace" in r.data] == []


def test_a_refusal_is_an_event_and_ends_its_step(home: Path) -> None:
    recorder = Recorder()
    with AgentKit(
        home=home, ids=SequentialIds(), rules=[DenyTools(frozenset({"wire"}))], observers=[recorder]
    ) as kit:

        @kit.tool(name="wire", compensate=lambda: None)
        def wire() -> None:
            raise AssertionError("never runs")

        with pytest.raises(SagaRolledBack) as raised, kit.transaction("pay"):
            wire()
    assert isinstance(raised.value.cause, GateRefused)
    assert recorder.events[1:4] == [
        ("step_begin", 1, "wire", "compensable"),
        ("gate_refused", 1, "deny_tools"),
        ("step_end", 1, "GateRefused"),
    ]
    assert recorder.events[-1] == ("saga_end", "rolled_back", "GateRefused")


def test_a_raising_observer_changes_nothing_and_is_counted(home: Path) -> None:
    undone: list[str] = []
    with AgentKit(home=home, ids=SequentialIds(), observers=[Broken()]) as kit:
        with pytest.raises(SagaRolledBack) as raised:
            three_steps(kit, undone)
        assert str(raised.value.cause) == "no courier"
        assert undone == ["charge", "book"]
        assert kit.observers.errors >= 12
        assert kit.observers.last_error is not None
        assert "observer bug" in kit.observers.last_error
        committed = kit.transaction("ok")
        with committed as saga:
            pass
        assert saga.status.value == "committed"


def test_an_observer_added_later_sees_only_sagas_started_after(kit: AgentKit) -> None:
    recorder = Recorder()
    with kit.transaction("before"):
        kit.observe(recorder)
    with kit.transaction("after"):
        pass
    assert recorder.events == [("saga_begin", "after"), ("saga_end", "committed", "NoneType")]
    kit.observers.remove(recorder)
    assert len(kit.observers) == 0


class ApproveAtOnce:
    """An approval channel whose approver says yes as soon as a request is posted."""

    def __init__(self) -> None:
        self.kit: AgentKit | None = None

    def request_posted(self, request: ApprovalRequest) -> None:
        assert self.kit is not None
        submit_vote(self.kit.store, request.id, "alice", "approve", channel="test")

    def request_decided(self, request: ApprovalRequest, outcome: str) -> None:
        return None


def test_approvals_requested_and_decided_are_events(home: Path) -> None:
    recorder = Recorder()
    channel = ApproveAtOnce()
    approvals = Approvals(approvers=["alice"], channels=[channel], poll=0.01)
    with AgentKit(home=home, ids=SequentialIds(), approvals=approvals) as kit:
        channel.kit = kit
        kit.observe(recorder)

        @kit.tool(name="bank.wire", semantics="irreversible")
        def wire(usd: int) -> str:
            return f"wired {usd}"

        with kit.transaction("pay"):
            assert wire(usd=5) == "wired 5"
    assert recorder.events[1:5] == [
        ("step_begin", 1, "bank.wire", "irreversible"),
        ("approval_requested", 1, "bank.wire"),
        ("approval_decided", 1, "approved", ("alice",)),
        ("step_end", 1, "NoneType"),
    ]


def test_an_expired_approval_is_decided_then_refused(home: Path) -> None:
    recorder = Recorder()
    approvals = Approvals(approvers=["alice"], expires_after=0.05, poll=0.01)
    with AgentKit(home=home, ids=SequentialIds(), approvals=approvals) as kit:
        kit.observe(recorder)

        @kit.tool(name="bank.wire", semantics="irreversible")
        def wire(usd: int) -> str:
            raise AssertionError("never runs")

        with pytest.raises(SagaRolledBack), kit.transaction("pay"):
            wire(usd=5)
    assert recorder.events[3:6] == [
        ("approval_decided", 1, "expired", ()),
        ("gate_refused", 1, "approval"),
        ("step_end", 1, "GateRefused"),
    ]
