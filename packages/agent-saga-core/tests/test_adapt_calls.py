"""The seam's handling of what agents do in their first minutes: calls the framework refuses,
retries of idempotent tools, outcomes a transport leaves unknown, masked arguments, pauses never
continued, and runs that outlive their transaction."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from agent_saga import (
    AgentKit,
    CompensatorRegistry,
    ConfigurationError,
    PendingCall,
    SagaEndedError,
    SagaRolledBack,
    ToolCallGuard,
    tool,
)
from agent_saga.testing import Ledger


class InvalidArguments(Exception):
    """Stands for a framework's 'the model sent bad arguments' error (raised before the body)."""


class Paused(Exception):
    """Stands for a framework's 'waiting for a human' exception."""


def data(kit: AgentKit, kind: str) -> list[dict[str, Any]]:
    return [r.data for r in kit.store.records() if r.kind == kind]


def booking(ledger: Ledger, **kw: Any) -> ToolCallGuard:
    return ToolCallGuard(
        "book", compensate=lambda seat: ledger.record(f"cancel {seat}"), parameters=["seat"], **kw
    )


def test_arguments_the_framework_refuses_are_no_failure(kit: AgentKit) -> None:
    ledger = Ledger()
    book = booking(ledger, invalid_call=(InvalidArguments,))

    def framework_call(seat: object) -> str:
        if not isinstance(seat, int):
            raise InvalidArguments(f"seat must be a number, got {seat!r}")
        ledger.record(f"book {seat}")
        return "ok"

    with kit.transaction():
        with pytest.raises(InvalidArguments):
            book.run({"seat": "window"}, lambda step: framework_call("window"))
        assert book.run({"seat": 7}, lambda step: framework_call(7)) == "ok"
    assert ledger.actions() == ["book 7"]
    assert [(d["ordinal"], d["rule"]) for d in data(kit, "gate.refused")] == [(1, "arguments")]
    assert data(kit, "saga.end")[-1]["status"] == "committed"


def test_a_retried_idempotent_call_is_the_same_step(kit: AgentKit) -> None:
    ledger = Ledger()
    keys: list[str] = []
    book = booking(ledger, idempotent=True)

    def flaky(step: Any) -> str:
        keys.append(step.idempotency_key)
        if len(keys) == 1:
            raise ConnectionError("timed out")
        ledger.record("book")
        return "ok"

    with kit.transaction():
        with pytest.raises(ConnectionError):
            book.run({"seat": 3}, flaky)
        assert book.run({"seat": 3}, flaky) == "ok"
    assert keys[0] == keys[1]
    assert ledger.actions() == ["book"]
    assert len(data(kit, "step.intent")) == 1
    assert [d["retryable"] for d in data(kit, "step.failed")] == [True]
    assert data(kit, "saga.end")[-1]["status"] == "committed"


def test_an_idempotent_failure_never_retried_rolls_back(kit: AgentKit) -> None:
    ledger = Ledger()
    pay = ToolCallGuard("pay", compensate=lambda: ledger.record("refund"))
    book = booking(ledger, idempotent=True)

    def fail(step: Any) -> str:
        raise ConnectionError("timed out")

    with pytest.raises(SagaRolledBack) as raised, kit.transaction():
        pay.run({}, lambda step: ledger.record("pay"))
        with pytest.raises(ConnectionError):
            book.run({"seat": 3}, fail)
        assert pay.run({}, lambda step: "later steps still run") == "later steps still run"
    assert isinstance(raised.value.cause, ConnectionError)
    assert ledger.actions() == ["pay", "refund", "refund"]


def test_a_repeated_call_of_a_failed_tool_is_refused(kit: AgentKit) -> None:
    ledger = Ledger()
    book = booking(ledger)

    def lands_then_fails(step: Any) -> str:
        ledger.record("book")
        raise TimeoutError("no reply")

    with pytest.raises(SagaRolledBack), kit.transaction():
        with pytest.raises(TimeoutError):
            book.run({"seat": 3}, lands_then_fails)
        again = book.run({"seat": 3}, lands_then_fails)  # a framework's retry policy
        assert again.rule == "saga_failed"  # type: ignore[union-attr]
    assert ledger.actions() == ["book"]


def test_an_unknown_outcome_asks_the_probe(tmp_path: Path) -> None:
    ledger = Ledger()
    registry = CompensatorRegistry()
    book = ToolCallGuard(
        "book",
        compensate=lambda seat: ledger.record(f"cancel {seat}"),
        probe=lambda seat: seat == 3,
        parameters=["seat"],
        registry=registry,
    )
    with AgentKit(home=tmp_path / "h", registry=registry) as kit:
        with pytest.raises(SagaRolledBack), kit.transaction():
            pending = book.begin({"seat": 3})
            assert isinstance(pending, PendingCall)
            pending.unknown(ConnectionError("connection reset after the request was sent"))
        assert [d["landed"] for d in data(kit, "step.probed")] == [True]
    assert ledger.actions() == ["cancel 3"]


def test_redacted_paths_never_reach_the_log(kit: AgentKit) -> None:
    pay = ToolCallGuard(
        "pay", semantics="reversible", parameters=["card", "amount"], redact=["card.cvv"]
    )
    seen: list[Any] = []
    with kit.transaction():
        pay.run({"card": {"cvv": "987", "no": "4111"}, "amount": 5}, seen.append)
    [intent] = data(kit, "step.intent")
    assert intent["args"] == {"card": {"cvv": {"$redacted": "write"}, "no": "4111"}, "amount": 5}
    assert "987" not in "".join(str(r.data) for r in kit.store.records())
    with pytest.raises(ConfigurationError, match="names no parameter"):
        ToolCallGuard("pay", semantics="reversible", parameters=["card"], redact=["cvv"])


def test_a_pause_never_continued_is_logged_failed(kit: AgentKit) -> None:
    ledger = Ledger()
    wire = ToolCallGuard("wire", compensate=lambda: ledger.record("recall"), pauses=(Paused,))

    def wait(step: Any) -> str:
        raise Paused("waiting for a human")

    with kit.transaction(), pytest.raises(Paused):
        wire.run({}, wait)
    [failed] = data(kit, "step.failed")
    assert "never resumed" in failed["error"]["message"]
    assert data(kit, "saga.end")[-1]["status"] == "committed"


def test_a_step_after_the_end_is_refused_and_logs_nothing(kit: AgentKit) -> None:
    ledger = Ledger()
    charge = ToolCallGuard("charge", semantics="reversible")

    @tool(semantics="reversible")
    def note(text: str) -> str:
        ledger.record(text)
        return text

    started = threading.Event()
    proceed = threading.Event()
    errors: list[BaseException] = []

    def background() -> None:  # a run the request started and did not wait for
        started.set()
        proceed.wait(5)
        for step in (lambda: charge.run({}, lambda s: ledger.record("charge")), lambda: note("x")):
            try:
                step()
            except SagaEndedError as exc:
                errors.append(exc)

    import contextvars

    with kit.transaction("request"):
        context = contextvars.copy_context()
        worker = threading.Thread(target=context.run, args=(background,))
        worker.start()
        started.wait(5)
    before = list(kit.store.records())
    proceed.set()
    worker.join(5)
    assert len(errors) == 2
    assert "has ended" in str(errors[0])
    assert ledger.actions() == []
    assert list(kit.store.records()) == before


def test_an_async_task_that_outlives_its_transaction_is_refused(kit: AgentKit) -> None:
    charge = ToolCallGuard("charge", semantics="reversible")

    async def main() -> BaseException | None:
        gate = asyncio.Event()

        async def effect(step: Any) -> None:
            await asyncio.sleep(0)

        async def later() -> None:
            await gate.wait()
            await charge.arun({}, effect)

        async with kit.transaction():
            task = asyncio.create_task(later())
        gate.set()
        try:
            await task
        except SagaEndedError as exc:
            return exc
        return None

    assert isinstance(asyncio.run(main()), SagaEndedError)
