"""Rollback: reverse order, at most once, failures recorded, savepoints, concurrency."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from agent_saga import (
    REVERSIBLE,
    AgentKit,
    GateRefused,
    HaltedError,
    Kind,
    MaxValue,
    SagaRolledBack,
    SagaStatus,
    current_saga,
)
from agent_saga.testing import Ledger


def travel_tools(kit: AgentKit, ledger: Ledger, *, refund_fails: bool = False):  # type: ignore[no-untyped-def]
    @kit.compensator(f"tests.rb.refund.{id(ledger)}")
    def refund(result: dict[str, str], idempotency_key: str) -> None:
        if refund_fails:
            raise ConnectionError("payments API down")
        ledger.record("refund", result["charge_id"])

    @kit.tool(name="payments.charge", compensate=f"tests.rb.refund.{id(ledger)}")
    def charge(amount: int, idempotency_key: str) -> dict[str, str]:
        ledger.record("charge", idempotency_key)
        return {"charge_id": idempotency_key}

    def cancel(flight: str) -> None:
        ledger.record("cancel", flight)

    @kit.tool(name="airline.reserve", compensate=cancel)
    def reserve(flight: str) -> str:
        ledger.record("reserve", flight)
        return flight

    def unhold(result: str) -> None:
        ledger.record("unhold", result)

    @kit.tool(name="hotel.hold", semantics=REVERSIBLE, compensate=unhold)
    def hold(room: str) -> str:
        ledger.record("hold", room)
        return room

    return reserve, charge, hold


def test_reverse_order_each_once(kit: AgentKit) -> None:
    ledger = Ledger()
    reserve, charge, hold = travel_tools(kit, ledger)
    with pytest.raises(SagaRolledBack) as info, kit.transaction("trip"):
        reserve("LH400")
        charge(250)
        hold("101")
        raise TimeoutError("email service timed out")
    assert ledger.actions() == ["reserve", "charge", "hold", "unhold", "refund", "cancel"]
    # Charged once, refunded once.
    assert ledger.count("charge") == 1
    assert ledger.count("refund") == 1
    report = info.value.report
    assert [s.tool for s in report.compensated] == [
        "hotel.hold",
        "payments.charge",
        "airline.reserve",
    ]
    assert report.status is SagaStatus.ROLLED_BACK
    assert report.ok
    assert isinstance(info.value.cause, TimeoutError)
    assert info.value.__cause__ is info.value.cause
    end = list(kit.store.records())[-1]
    assert end.kind == Kind.SAGA_END
    assert end.data["status"] == "rolled_back"
    assert end.data["compensated"] == [3, 2, 1]


def test_failing_compensation_is_recorded_and_the_rest_still_run(kit: AgentKit) -> None:
    ledger = Ledger()
    reserve, charge, _ = travel_tools(kit, ledger, refund_fails=True)
    with pytest.raises(SagaRolledBack) as info, kit.transaction("trip"):
        reserve("LH400")
        charge(250)
        raise RuntimeError("boom")
    report = info.value.report
    assert report.status is SagaStatus.NEEDS_HUMAN
    assert [f.step.tool for f in report.failed] == ["payments.charge"]
    assert "payments API down" in report.failed[0].error
    assert ledger.count("cancel") == 1  # the earlier step was still compensated
    records = list(kit.store.records())
    failed = [r for r in records if r.kind == Kind.COMP_FAILED]
    assert failed[0].data["error"] == {"type": "ConnectionError", "message": "payments API down"}
    assert records[-1].data["status"] == "needs_human"
    assert "needs_human" in str(info.value)


def test_failed_step_is_not_compensated_and_gate_refusal_rolls_back(home: Path) -> None:
    ledger = Ledger()
    with AgentKit(home=home, rules=[MaxValue(1000, tools=frozenset({"payments.charge"}))]) as kit:
        reserve, charge, _ = travel_tools(kit, ledger)
        with pytest.raises(SagaRolledBack) as info, kit.transaction("trip"):
            reserve("LH400")
            charge(5_000_000)
    assert isinstance(info.value.cause, GateRefused)
    assert info.value.cause.rule == "max_value"
    assert ledger.count("charge") == 0
    assert ledger.actions() == ["reserve", "cancel"]


def test_refused_at_start_leaves_no_state(home: Path) -> None:
    ledger = Ledger()
    with AgentKit(home=home) as kit:
        reserve, _, _ = travel_tools(kit, ledger)
        kit.halt("incident 42")
        with pytest.raises(HaltedError, match="incident 42"), kit.transaction("trip"):
            pass
        assert current_saga() is None
        # A later call outside a transaction is not routed into a dead saga.
        assert reserve("LH1") == "LH1"
        assert ledger.actions() == ["reserve"]
        assert not [r for r in kit.store.records() if r.kind == Kind.SAGA_BEGIN]
        refusals = [r for r in kit.store.records() if r.kind == Kind.GATE_REFUSED]
        assert refusals[0].data["rule"] == "kill_switch"


def test_nested_transaction_is_a_savepoint(kit: AgentKit) -> None:
    ledger = Ledger()
    reserve, charge, _ = travel_tools(kit, ledger)
    with kit.transaction("outer") as outer:
        reserve("LH1")
        with pytest.raises(SagaRolledBack) as info, kit.transaction("inner") as inner:
            assert inner is outer
            charge(10)
            raise ValueError("inner failure")
        assert [s.tool for s in info.value.report.compensated] == ["payments.charge"]
        charge(20)
    assert ledger.actions() == ["reserve", "charge", "refund", "charge"]
    assert list(kit.store.records())[-1].data["status"] == "committed"


def test_outer_failure_after_savepoint_compensates_each_step_once(kit: AgentKit) -> None:
    ledger = Ledger()
    reserve, charge, _ = travel_tools(kit, ledger)
    with pytest.raises(SagaRolledBack) as info, kit.transaction("outer"):
        reserve("LH1")
        with kit.transaction("inner"):
            charge(10)
        with pytest.raises(SagaRolledBack), kit.transaction("inner2"):
            charge(30)
            raise ValueError("inner2")
        raise KeyError("outer")
    assert ledger.actions() == ["reserve", "charge", "charge", "refund", "refund", "cancel"]
    assert ledger.duplicates() == []
    assert isinstance(info.value.cause, KeyError)


def test_inner_failure_propagating_keeps_original_cause(kit: AgentKit) -> None:
    ledger = Ledger()
    reserve, charge, _ = travel_tools(kit, ledger)
    with pytest.raises(SagaRolledBack) as info, kit.transaction("outer"):
        reserve("LH1")
        with kit.transaction("inner"):
            charge(10)
            raise ZeroDivisionError("inner")
    assert isinstance(info.value.cause, ZeroDivisionError)
    assert [s.tool for s in info.value.report.compensated] == ["payments.charge", "airline.reserve"]
    assert ledger.count("refund") == 1


def test_keyboard_interrupt_rolls_back_and_propagates(kit: AgentKit) -> None:
    ledger = Ledger()
    reserve, _, _ = travel_tools(kit, ledger)
    with pytest.raises(KeyboardInterrupt) as info, kit.transaction("t"):
        reserve("LH1")
        raise KeyboardInterrupt
    assert ledger.actions() == ["reserve", "cancel"]
    assert any("rolled back" in note for note in info.value.__notes__)


def test_threads_each_see_their_own_saga(kit: AgentKit) -> None:
    ledger = Ledger()
    reserve, charge, _ = travel_tools(kit, ledger)
    seen: dict[int, str] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(6)

    def worker(n: int) -> None:
        try:
            with kit.transaction(f"w{n}") as saga:
                barrier.wait()
                reserve(f"F{n}")
                charge(n)
                current = current_saga()
                assert current is saga
                seen[n] = saga.id
                if n % 2:
                    raise RuntimeError(f"worker {n} fails")
        except SagaRolledBack:
            pass
        except BaseException as exc:  # pragma: no cover - surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(set(seen.values())) == 6
    assert ledger.count("charge") == 6
    assert ledger.count("refund") == 3
    assert sorted(e.key for e in ledger.events() if e.action == "cancel") == ["F1", "F3", "F5"]
    assert kit.verify().ok


def test_asyncio_tasks_each_see_their_own_saga(kit: AgentKit) -> None:
    ledger = Ledger()

    @kit.tool(name="tests.rb.async_book", compensate=lambda result: ledger.record("unbook", result))
    async def book(seat: str) -> str:
        await asyncio.sleep(0)
        ledger.record("book", seat)
        return seat

    async def agent(n: int) -> str:
        async with kit.transaction(f"a{n}") as saga:
            await book(f"S{n}")
            await asyncio.sleep(0)
            assert current_saga() is saga
            await book(f"T{n}")
            if n == 1:
                raise RuntimeError("task 1 fails")
            return saga.id

    async def main() -> list[str | BaseException]:
        return await asyncio.gather(*(agent(n) for n in range(4)), return_exceptions=True)

    results = asyncio.run(main())
    assert isinstance(results[1], SagaRolledBack)
    ids = [r for r in results if isinstance(r, str)]
    assert len(set(ids)) == 3
    assert sorted(e.key for e in ledger.events() if e.action == "unbook") == ["S1", "T1"]
    assert ledger.actions().count("book") == 8
