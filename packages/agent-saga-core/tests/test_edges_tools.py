"""Promises at the edges of a tool: whose kit it belongs to, generator tools, an interrupted
compensation, a step that raised after its effect landed, a result too large to log, and caps
that must refuse infinities.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_saga import (
    COMPENSABLE,
    REVERSIBLE,
    AgentKit,
    ConfigurationError,
    GateRefused,
    MaxValue,
    SagaRolledBack,
    SagaStatus,
    SequentialIds,
    build_history,
    compensator,
    saga_scope,
    verify_file,
)
from agent_saga.testing import Ledger

# -- 1. a tool declared on one kit never runs under another kit's gate -------------------------


def test_a_tool_of_a_halted_kit_is_refused_inside_another_kits_transaction(
    tmp_path: Path,
) -> None:
    ledger = Ledger()
    with (
        AgentKit(home=tmp_path / "bank", rules=[MaxValue(1000)], name="bank") as bank,
        AgentKit(home=tmp_path / "other", name="other") as other,
    ):

        @bank.tool(name="bank.transfer", compensate=lambda: None)
        def transfer(to: str, amount: float) -> None:
            ledger.record(f"transfer {amount} to {to}")

        bank.halt("fraud investigation")
        with pytest.raises(SagaRolledBack) as caught, other.transaction("elsewhere"):
            transfer("acme", 10_000_000)
        refusal = caught.value.cause
        assert isinstance(refusal, GateRefused)
        assert refusal.rule == "kit"
        assert "'bank'" in refusal.reason
        assert "'other'" in refusal.reason
        assert ledger.actions() == []
        refused = [r for r in other.store.records() if r.kind == "gate.refused"]
        assert [r.data["rule"] for r in refused] == ["kit"]
        assert all(r.kind.startswith("control.") for r in bank.store.records())


def test_a_tool_of_a_kit_is_refused_inside_the_default_kits_scope(tmp_path: Path) -> None:
    ledger = Ledger()
    with AgentKit(home=tmp_path / "bank", name="bank") as bank:

        @bank.tool(name="bank.pay", compensate=lambda: None)
        def pay(amount: float) -> None:
            ledger.record("pay")

        with pytest.raises(SagaRolledBack) as caught, saga_scope("default"):
            pay(10)
        assert isinstance(caught.value.cause, GateRefused)
        assert "'bank'" in caught.value.cause.reason
        assert ledger.actions() == []
        with bank.transaction("own"):
            pay(10)  # in its own kit it runs
        assert ledger.actions() == ["pay"]


# -- 8. generator tools are refused when declared ----------------------------------------------


def test_generator_tools_are_refused_at_declaration(kit: AgentKit) -> None:
    def numbers() -> Iterator[int]:
        yield 1

    async def anumbers() -> AsyncIterator[int]:
        yield 1

    with pytest.raises(ConfigurationError, match="generator"):
        kit.tool(numbers, semantics=REVERSIBLE)
    with pytest.raises(ConfigurationError, match="generator"):
        kit.tool(anumbers, semantics=REVERSIBLE)


# -- 9. an interrupted compensation stays pending for recovery ---------------------------------

INTERRUPTED = Ledger()


@compensator("edges.refund_interrupted")
def _refund_interrupted(idempotency_key: str) -> None:
    if INTERRUPTED.count("interrupt") == 0:
        INTERRUPTED.record("interrupt")
        raise KeyboardInterrupt
    INTERRUPTED.record("refund", idempotency_key)


@compensator("edges.cancel")
def _cancel(idempotency_key: str) -> None:
    INTERRUPTED.record("cancel", idempotency_key)


def test_ctrl_c_in_a_compensator_leaves_the_rollback_to_recovery(home: Path) -> None:
    with AgentKit(home=home, ids=SequentialIds()) as kit:

        @kit.tool(name="edges.book", compensate="edges.cancel")
        def book() -> None:
            INTERRUPTED.record("book")

        @kit.tool(name="edges.charge", compensate="edges.refund_interrupted")
        def charge() -> None:
            INTERRUPTED.record("charge")

        with pytest.raises(KeyboardInterrupt), kit.transaction("trip"):
            book()
            charge()
            raise RuntimeError("shipping is down")
        ends = [r for r in kit.store.records() if r.kind == "saga.end"]
        assert ends == []  # never "rolled_back" with a compensation that did not finish
    with AgentKit(home=home) as again:
        report = again.recover()
        (end,) = [r for r in again.store.records() if r.kind == "saga.end"]
    assert INTERRUPTED.count("refund") == 1
    assert INTERRUPTED.count("cancel") == 1
    assert end.data["status"] == "rolled_back"
    assert [s.status for s in report.recovered] == [SagaStatus.ROLLED_BACK]


# -- 10. a step whose body raised after its effect landed -------------------------------------


def test_a_timeout_after_the_charge_landed_is_compensated_when_the_probe_says_so(
    kit: AgentKit,
) -> None:
    ledger = Ledger()

    def landed(idempotency_key: str) -> bool:
        return ledger.count("charge", idempotency_key) == 1

    def refund(idempotency_key: str) -> None:
        ledger.record("refund", idempotency_key)

    @kit.tool(name="edges.charge_probed", compensate=refund, probe=landed)
    def charge(amount: float, idempotency_key: str = "") -> None:
        ledger.record("charge", idempotency_key)
        raise TimeoutError("the payment API timed out after taking the money")

    with pytest.raises(SagaRolledBack) as caught, kit.transaction("checkout"):
        charge(20.0)
    assert ledger.count("refund") == 1
    assert [s.tool for s in caught.value.report.compensated] == ["edges.charge_probed"]
    assert caught.value.report.unknown == ()


def test_a_raised_step_without_a_probe_is_reported_unknown(kit: AgentKit) -> None:
    @kit.tool(name="edges.charge_blind", compensate=lambda: None)
    def charge(amount: float) -> None:
        raise TimeoutError("timed out")

    with pytest.raises(SagaRolledBack) as caught, kit.transaction("checkout"):
        charge(20.0)
    assert [s.tool for s in caught.value.report.unknown] == ["edges.charge_blind"]
    assert caught.value.report.compensated == ()
    manifest = kit.guarantees()
    assert any("raised" in limit and "probe" in limit for limit in manifest["not_claimed"])


# -- 11. an oversized buffered record loses nothing ------------------------------------------


def test_a_huge_reversible_result_does_not_lose_the_buffered_records(kit: AgentKit) -> None:
    @kit.tool(name="edges.render", semantics=REVERSIBLE)
    def render() -> str:
        return "x" * (5 * 1024 * 1024)

    @kit.tool(name="edges.reserve", semantics=COMPENSABLE, compensate=lambda: None)
    def reserve() -> str:
        return "ok"

    with kit.transaction("report"):
        assert len(render()) == 5 * 1024 * 1024
        assert reserve() == "ok"
    records = list(kit.store.records())
    kinds = [r.kind for r in records]
    assert kinds[:5] == ["saga.begin", "step.intent", "step.done", "step.intent", "step.done"]
    assert kinds[-1] == "saga.end"
    (saga,) = build_history(records).sagas
    assert saga.status is SagaStatus.COMMITTED
    big = records[2].data
    assert big["result_restorable"] is False
    assert "too large" in str(big["result"])
    assert verify_file(kit.home / "log.jsonl").ok


def test_a_result_too_large_only_with_its_salts_does_not_lose_the_buffered_records(
    kit: AgentKit,
) -> None:
    """200,000 small leaves: about 0.4 MB of JSON, but one 22-character salt each in the record
    (4.4 MB more), so the record is over the limit though the value alone is not."""
    leaves = 200_000

    @kit.tool(name="edges.scan", semantics=REVERSIBLE)
    def scan() -> list[int]:
        return [0] * leaves

    @kit.tool(name="edges.reserve", semantics=COMPENSABLE, compensate=lambda: None)
    def reserve() -> str:
        return "ok"

    with kit.transaction("report"):
        assert len(scan()) == leaves
        assert reserve() == "ok"
    records = list(kit.store.records())
    (saga,) = build_history(records).sagas
    assert saga.status is SagaStatus.COMMITTED
    big = records[2].data
    assert big["result_restorable"] is False
    assert "too large" in str(big["result"])
    assert verify_file(kit.home / "log.jsonl").ok


# -- 15. an amount cap refuses what it cannot compare ----------------------------------------


@pytest.mark.parametrize("value", [-math.inf, math.inf, math.nan])
def test_max_value_refuses_infinities_and_nan(home: Path, value: float) -> None:
    refused: list[Any] = []
    with AgentKit(home=home, rules=[MaxValue(1000)]) as kit:

        @kit.tool(name="edges.wire", compensate=lambda: None)
        def wire(amount: float) -> None:
            refused.append("ran")

        with pytest.raises(SagaRolledBack) as caught, kit.transaction("wire"):
            wire(value)
    assert isinstance(caught.value.cause, GateRefused)
    assert refused == []


@pytest.mark.parametrize("limit", [math.inf, -math.inf, math.nan])
def test_max_value_refuses_a_limit_that_is_not_finite(limit: float) -> None:
    with pytest.raises(ValueError, match="finite"):
        MaxValue(limit)
