"""The adapter seam: externally described tools as saga steps, failures a framework swallowed,
refusals as outcomes, pauses that re-run a call, and the two-phase form."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from agent_saga import (
    AgentKit,
    Approvals,
    ConfigurationError,
    DenyTools,
    GateRefused,
    MemoryKillSwitch,
    PendingCall,
    RefusedCall,
    SagaRolledBack,
    SagaStatus,
    StepRef,
    ToolCallGuard,
    ToolFailed,
    build_history,
    declarations_for,
    idempotency_key,
    submit_vote,
)
from agent_saga.testing import Ledger


class Paused(Exception):
    """Stands for a framework's 'waiting for an event' exception."""


def kinds(kit: AgentKit) -> list[str]:
    return [r.kind for r in kit.store.records()]


def effect(ledger: Ledger, action: str) -> str:
    ledger.record(action)
    return f"{action}-1"


def charge_guard(ledger: Ledger, **kw: Any) -> ToolCallGuard:
    def refund(amount: int, idempotency_key: str) -> None:
        ledger.record("refund", idempotency_key)

    return ToolCallGuard("charge", compensate=refund, parameters=["amount", "to"], **kw)


def test_swallowed_exception_rolls_back_when_the_block_ends(kit: AgentKit) -> None:
    ledger = Ledger()
    charge = charge_guard(ledger)
    book = ToolCallGuard(
        "book", compensate=lambda: ledger.record("cancel"), semantics="compensable"
    )
    fail = ToolCallGuard("notify", semantics="reversible")
    seen: list[str] = []

    def framework_call(guard: ToolCallGuard, args: dict[str, Any], body: Any) -> str:
        # What frameworks do: catch the tool's exception and give the model its text.
        try:
            return str(guard.run(args, lambda step: body()))
        except Exception as exc:
            seen.append(str(exc))
            return f"error: {exc}"

    def boom() -> str:
        raise ValueError("mail server down")

    with pytest.raises(SagaRolledBack) as raised, kit.transaction("trip"):
        framework_call(charge, {"amount": 5, "to": "bob"}, lambda: effect(ledger, "charge"))
        framework_call(book, {}, lambda: effect(ledger, "book"))
        framework_call(fail, {}, boom)
        # The loop went on normally: nothing was raised into the block.
    assert seen == ["mail server down"]
    assert isinstance(raised.value.cause, ValueError)
    assert ledger.actions() == ["charge", "book", "cancel", "refund"]
    assert raised.value.report.status is SagaStatus.ROLLED_BACK
    assert "step.failed" in kinds(kit)
    assert kit.verify().ok


def test_error_value_counts_as_failure_and_later_steps_are_refused(kit: AgentKit) -> None:
    ledger = Ledger()
    charge = charge_guard(ledger)
    with pytest.raises(SagaRolledBack) as raised, kit.transaction():
        out = charge.run(
            {"amount": 1, "to": "x"},
            lambda step: {"status": "error", "text": "declined"},
            error_of=lambda v: ToolFailed(v["text"]) if v["status"] == "error" else None,
        )
        assert out == {"status": "error", "text": "declined"}
        again = charge.run({"amount": 1, "to": "x"}, lambda step: ledger.record("charge"))
        assert isinstance(again, RefusedCall)
        assert again.rule == "saga_failed"
    assert str(raised.value.cause) == "declined"
    assert ledger.count("charge") == 0
    assert kinds(kit).count("gate.refused") == 1


def test_result_of_is_what_the_compensator_receives(kit: AgentKit) -> None:
    got: list[object] = []

    def refund(result: object) -> None:
        got.append(result)

    guard = ToolCallGuard("charge", compensate=refund)
    with pytest.raises(SagaRolledBack), kit.transaction():
        guard.run({}, lambda step: {"wrapped": "ch_1"}, result_of=lambda v: v["wrapped"])
        raise RuntimeError("later failure")
    assert got == ["ch_1"]


def test_refusal_is_an_outcome_and_the_body_never_runs() -> None:
    ledger = Ledger()
    with AgentKit(store="memory", rules=[DenyTools(frozenset({"charge"}))]) as kit:
        charge = charge_guard(ledger)
        with kit.transaction():
            out = charge.run({"amount": 5, "to": "x"}, lambda step: ledger.record("charge"))
            assert isinstance(out, RefusedCall)
            assert out.rule == "deny_tools"
            assert "deny list" in out.message
            assert "charge" in out.message
            assert isinstance(out.error(), GateRefused)
        assert ledger.count("charge") == 0
        assert kinds(kit)[-1] == "saga.end"
        assert [r.data.get("status") for r in kit.store.records() if r.kind == "saga.end"] == [
            "committed"
        ]


def test_on_refusal_rollback_dooms_the_transaction() -> None:
    ledger = Ledger()
    with AgentKit(store="memory", rules=[DenyTools(frozenset({"book"}))]) as kit:
        charge = charge_guard(ledger)
        book = ToolCallGuard("book", semantics="reversible", on_refusal="rollback")
        with pytest.raises(SagaRolledBack) as raised, kit.transaction():
            charge.run({"amount": 5, "to": "x"}, lambda step: ledger.record("charge"))
            assert isinstance(book.run({}, lambda step: None), RefusedCall)
        assert isinstance(raised.value.cause, GateRefused)
        assert ledger.actions() == ["charge", "refund"]


def test_halt_always_dooms() -> None:
    switch = MemoryKillSwitch()
    with AgentKit(store="memory", kill_switch=switch) as kit:
        guard = ToolCallGuard("read", semantics="reversible")
        with pytest.raises(SagaRolledBack), kit.transaction():
            guard.run({}, lambda step: "ok")
            switch.halt("incident", at=0.0)
            out = guard.run({}, lambda step: "ok")
            assert isinstance(out, RefusedCall)
            assert out.halted


def test_outside_a_transaction_the_effect_runs_untouched() -> None:
    guard = ToolCallGuard("charge", compensate=lambda: None)
    assert guard.begin({"a": 1}) is None
    assert guard.run({"a": 1}, lambda step: step) is None
    assert asyncio.run(guard.arun({}, _echo_step)) is None


async def _echo_step(step: StepRef | None) -> StepRef | None:
    return step


def test_async_effects_and_step_identity(kit: AgentKit) -> None:
    guard = ToolCallGuard("read", semantics="reversible", parameters=["q"])

    async def main() -> StepRef | RefusedCall | None:
        async with kit.transaction():
            return await guard.arun({"q": "x"}, _echo_step)

    step = asyncio.run(main())
    assert isinstance(step, StepRef)
    assert step.ordinal == 1
    assert step.tool == "read"
    assert step.idempotency_key.startswith("as1-")


def test_async_failure_rolls_back(kit: AgentKit) -> None:
    ledger = Ledger()
    charge = charge_guard(ledger)

    async def failing(step: StepRef | None) -> str:
        raise ValueError("nope")

    async def ok(step: StepRef | None) -> str:
        ledger.record("charge", step.idempotency_key if step else "")
        return "c1"

    async def main() -> None:
        async with kit.transaction():
            await charge.arun({"amount": 1, "to": "x"}, ok)
            with pytest.raises(ValueError, match="nope"):
                await charge.arun({"amount": 2, "to": "y"}, failing)

    with pytest.raises(SagaRolledBack):
        asyncio.run(main())
    assert ledger.actions() == ["charge", "refund"]


def test_pause_is_no_failure_and_the_rerun_is_the_same_step(kit: AgentKit) -> None:
    ledger = Ledger()
    charge = charge_guard(ledger, pauses=(Paused,))
    answers: list[str] = []

    def body(step: StepRef | None) -> str:
        assert step is not None
        if not answers:
            raise Paused("waiting for a human")
        ledger.record("charge", step.idempotency_key)
        return "c1"

    with kit.transaction() as saga:
        with pytest.raises(Paused):
            charge.run({"amount": 5, "to": "x"}, body)
        answers.append("yes")
        assert charge.run({"amount": 5, "to": "x"}, body) == "c1"
        saga_id = saga.id
    assert ledger.count("charge") == 1
    assert [r.kind for r in kit.store.records() if r.saga == saga_id] == [
        "saga.begin",
        "step.intent",
        "step.done",
        "saga.end",
    ]
    view = build_history(kit.store.records()).sagas[0]
    assert view.status is SagaStatus.COMMITTED


def test_two_phases(kit: AgentKit) -> None:
    guard = ToolCallGuard("read", semantics="reversible")
    with kit.transaction():
        pending = guard.begin({})
        assert isinstance(pending, PendingCall)
        assert pending.run(lambda step: 42) == 42
    assert kinds(kit).count("step.done") == 1


def test_nested_savepoint_takes_only_its_own_doom(kit: AgentKit) -> None:
    ledger = Ledger()
    charge = charge_guard(ledger)
    with kit.transaction():
        charge.run({"amount": 1, "to": "a"}, lambda step: ledger.record("charge"))
        with pytest.raises(SagaRolledBack), kit.transaction():
            charge.run({"amount": 2, "to": "b"}, lambda step: ledger.record("charge"))
            with pytest.raises(KeyError):
                charge.run({"amount": 3, "to": "c"}, _raise_key_error)
    assert ledger.actions() == ["charge", "charge", "refund"]
    ends = [r.data.get("status") for r in kit.store.records() if r.kind == "saga.end"]
    assert ends == ["committed"]


def _raise_key_error(step: StepRef | None) -> None:
    raise KeyError("card")


def test_bad_declarations_fail_early() -> None:
    with pytest.raises(ConfigurationError):
        ToolCallGuard("charge", semantics="compensable")
    with pytest.raises(ValueError, match="on_refusal"):
        ToolCallGuard("read", semantics="reversible", on_refusal="ignore")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="requires 'card'"):
        ToolCallGuard("charge", compensate=lambda card: None, parameters=["amount"])
    # Schema names that cannot be Python parameters are ignored, not an error.
    guard = ToolCallGuard("x", semantics="reversible", parameters=["from", "a-b", "ok"])
    assert list(guard.spec.signature.parameters) == ["ok"]


def test_declarations_for_keeps_order_and_catches_typos() -> None:
    found = declarations_for(["charge", "read"], {"read": {"semantics": "reversible"}})
    assert found == [{}, {"semantics": "reversible"}]
    with pytest.raises(ValueError, match="chrage"):
        declarations_for(["charge"], {"chrage": {"semantics": "reversible"}})


class VoteWhenPosted:
    """An approval channel whose human answers shortly after each request is posted."""

    def __init__(self, decision: str) -> None:
        self.decision = decision
        self.kit: AgentKit | None = None

    def request_posted(self, request: Any) -> None:
        kit = self.kit
        assert kit is not None

        def vote() -> None:
            submit_vote(kit.store, request.id, "alice", self.decision, channel="test")

        threading.Timer(0.05, vote).start()

    def request_decided(self, request: Any, decision: str) -> None:
        pass


@pytest.mark.parametrize("decision", ["approve", "deny"])
def test_an_approval_wait_does_not_block_the_event_loop(tmp_path: Path, decision: str) -> None:
    channel = VoteWhenPosted(decision)
    approvals = Approvals(approvers=["alice"], channels=[channel], poll=0.01)
    ledger = Ledger()
    guard = ToolCallGuard("wire", semantics="irreversible", parameters=["amount"])
    ticks: list[int] = []

    async def wire(step: StepRef | None) -> str:
        ledger.record("wire")
        return "wired"

    async def ticker() -> None:
        while True:
            ticks.append(1)
            await asyncio.sleep(0.005)

    async def main(kit: AgentKit) -> object:
        task = asyncio.create_task(ticker())
        try:
            async with kit.transaction():
                return await guard.arun({"amount": 5}, wire)
        finally:
            task.cancel()

    with AgentKit(home=tmp_path / "h", approvals=approvals) as kit:
        channel.kit = kit
        out = asyncio.run(main(kit))
    assert len(ticks) > 3  # the loop kept running while the human decided
    if decision == "approve":
        assert out == "wired"
        assert ledger.actions() == ["wire"]
    else:
        assert isinstance(out, RefusedCall)
        assert out.rule == "approval"
        assert ledger.actions() == []


def test_a_model_cannot_choose_a_steps_idempotency_key(kit: AgentKit) -> None:
    guard = ToolCallGuard("pay.charge", compensate=lambda: None, parameters=["amount"])
    with kit.transaction("pay") as saga:
        pending = guard.begin({"amount": 5, "idempotency_key": "as1-someone-elses-key"})
        assert isinstance(pending, PendingCall)
        assert pending.step.idempotency_key == idempotency_key(saga.id, 1, "pay.charge")
        pending.run(lambda step: None)
    (intent,) = [r for r in kit.store.records() if r.kind == "step.intent"]
    assert intent.data["idempotency_key"] != "as1-someone-elses-key"
    assert "idempotency_key" not in intent.data["args"]  # type: ignore[operator]
