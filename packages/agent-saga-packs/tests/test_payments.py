"""The payments pack against the SQLite bank: refunds for charges, gates for wires."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from agent_saga import (
    AgentKit,
    ApprovalRequest,
    Approvals,
    CompensatorRegistry,
    FakeClock,
    GateRefused,
    SagaRolledBack,
    SagaStatus,
    ToolCall,
    submit_vote,
)
from agent_saga_packs.payments import PaymentsPack, wire_rules
from agent_saga_packs.testing import BankError, LedgerBank
from pytest_agent_saga import ChaosRunner

if TYPE_CHECKING:
    from pathlib import Path

START = 1_800_000_000.0


class Treasury:
    """Approvers who vote as soon as a request is posted (a stand-in for people clicking)."""

    def __init__(self, voters: list[str]) -> None:
        self.voters = voters
        self.kit: AgentKit | None = None
        self.requests: list[ApprovalRequest] = []

    def request_posted(self, request: ApprovalRequest) -> None:
        assert self.kit is not None
        self.requests.append(request)
        for voter in self.voters:
            submit_vote(self.kit.store, request.id, voter, "approve", channel="test")

    def request_decided(self, request: ApprovalRequest, decision: str) -> None:
        return None


def approve(call: ToolCall) -> bool:
    return True


def sanctions_clear(call: ToolCall) -> bool:
    return bool(call.arg("beneficiary") != "SANCTIONED-LTD")


def within_limits(call: ToolCall) -> bool:
    amount: int = call.arg("amount")
    return amount <= 50_000_000


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def bank(tmp_path: Path, clock: FakeClock) -> LedgerBank:
    return LedgerBank(tmp_path / "bank.db", clock=clock.now)


def treasury_kit(
    tmp_path: Path, bank: LedgerBank, clock: FakeClock, voters: list[str], **rules: Any
) -> tuple[AgentKit, PaymentsPack, Treasury]:
    treasury = Treasury(voters)
    kit = AgentKit(
        home=tmp_path / "agent",
        registry=CompensatorRegistry(),
        rules=wire_rules(
            [sanctions_clear, within_limits, approve],
            recent_wires=bank.recent_wires,
            approval_above=1_000_000,
            clock=clock.now,
            **rules,
        ),
        approvals=Approvals(
            approvers=["unix:alice", "unix:bob"], channels=[treasury], expires_after=5, poll=0.005
        ),
    )
    treasury.kit = kit
    return kit, PaymentsPack(kit, bank), treasury


def test_a_failed_checkout_refunds_the_charges_newest_first(
    tmp_path: Path, bank: LedgerBank
) -> None:
    with AgentKit(home=tmp_path / "agent", registry=CompensatorRegistry()) as kit:
        pack = PaymentsPack(kit, bank)
        with pytest.raises(SagaRolledBack) as failed, kit.transaction("checkout"):
            first = pack.charge("cus_ana", 4_200, "EUR")
            second = pack.charge("cus_ana", 1_300, "EUR")
            assert bank.balances() == {"charged:cus_ana": 5_500}
            raise RuntimeError("warehouse API is down")
        undone = [r.data["ordinal"] for r in kit.store.records() if r.kind == "compensation.done"]
    assert failed.value.report.status is SagaStatus.ROLLED_BACK
    assert bank.refunds() == [second["charge_id"], first["charge_id"]]
    assert bank.balances() == {}
    assert undone == [2, 1]
    # A refund runs at most once, whatever key a retry brings.
    again = bank.refund(first["charge_id"], idempotency_key="another-key")
    assert bank.refunds() == [second["charge_id"], first["charge_id"]]
    assert again["charge_id"] == first["charge_id"]


def test_a_charge_is_idempotent_on_its_key(bank: LedgerBank) -> None:
    first = bank.charge("cus_ana", 100, "EUR", idempotency_key="k-1")
    assert bank.charge("cus_ana", 100, "EUR", idempotency_key="k-1") == first
    assert bank.balances() == {"charged:cus_ana": 100}
    with pytest.raises(BankError, match=r"positive integer of minor units, got 1\.5"):
        bank.charge("cus_ana", 1.5, "EUR", idempotency_key="k-2")  # type: ignore[arg-type]


def test_a_wire_needs_every_validator(tmp_path: Path, bank: LedgerBank, clock: FakeClock) -> None:
    kit, pack, treasury = treasury_kit(tmp_path, bank, clock, ["unix:alice"])
    with kit:
        with kit.transaction("supplier run"):
            sent = pack.wire("ACME-GMBH", 250_000, "EUR", "INV-1")
            with pytest.raises(GateRefused) as refused:
                pack.wire("SANCTIONED-LTD", 10_000, "EUR", "INV-2")
        votes = [r.data for r in kit.store.records() if r.kind == "gate.vote"]
    assert refused.value.rule == "wire_consensus"
    assert "2 of 3 validators approved, 3 required (sanctions_clear: refused)" in str(refused.value)
    assert [v["vote"] for v in votes] == ["approve"] * 3 + ["refuse", "approve", "approve"]
    assert bank.balances() == {"wired:ACME-GMBH": 250_000}
    assert sent["wire_id"] == "wt_0001"
    assert len(treasury.requests) == 1  # the refused wire never reached a human


def test_above_the_threshold_two_people_must_approve(
    tmp_path: Path, bank: LedgerBank, clock: FakeClock
) -> None:
    kit, pack, treasury = treasury_kit(tmp_path, bank, clock, ["unix:alice", "unix:bob"])
    with kit, kit.transaction("payroll"):
        pack.wire("PAYROLL", 900_000, "EUR", "JAN")
        pack.wire("PAYROLL", 4_000_000, "EUR", "BONUS")
    assert [r.quorum for r in treasury.requests] == [1, 2]
    assert "a wire above 1000000 needs 2 approvers" in treasury.requests[1].reason
    assert bank.balances() == {"wired:PAYROLL": 4_900_000}


def test_one_approver_is_not_enough_above_the_threshold(
    tmp_path: Path, bank: LedgerBank, clock: FakeClock
) -> None:
    kit, pack, _ = treasury_kit(tmp_path, bank, clock, ["unix:alice"])
    kit.runtime.approvals.expires_after = 0.3  # type: ignore[union-attr]
    with kit, pytest.raises(SagaRolledBack) as failed, kit.transaction("payroll"):
        pack.wire("PAYROLL", 4_000_000, "EUR", "BONUS")
    assert isinstance(failed.value.cause, GateRefused)
    assert bank.balances() == {}


def test_without_an_approval_channel_a_wire_is_refused(tmp_path: Path, bank: LedgerBank) -> None:
    with AgentKit(home=tmp_path / "agent", registry=CompensatorRegistry()) as kit:
        pack = PaymentsPack(kit, bank)
        with kit.transaction("t"), pytest.raises(GateRefused, match="IRREVERSIBLE"):
            pack.wire("ACME-GMBH", 10, "EUR", "x")
    assert bank.balances() == {}


def test_the_same_wire_twice_within_a_day_is_refused(
    tmp_path: Path, bank: LedgerBank, clock: FakeClock
) -> None:
    kit, pack, _ = treasury_kit(tmp_path, bank, clock, ["unix:alice"])
    with kit:
        with kit.transaction("morning"):
            pack.wire("ACME-GMBH", 250_000, "EUR", "INV-1")
        clock.advance(3_600)
        with kit.transaction("retry storm"):
            with pytest.raises(GateRefused) as refused:
                pack.wire("acme-gmbh ", 250_000, "EUR", "INV-1 again")
            pack.wire("ACME-GMBH", 250_001, "EUR", "INV-3")  # another amount
        clock.advance(86_400)
        with kit.transaction("next day"):
            pack.wire("ACME-GMBH", 250_000, "EUR", "INV-4")
    assert refused.value.rule == "duplicate_wire"
    assert str(refused.value) == (
        "payments.wire: refused by duplicate_wire: a wire with beneficiary='acme-gmbh ', "
        "amount=250000 was already made within the last 1 day (wt_0001)"
    )
    assert bank.balances() == {"wired:ACME-GMBH": 750_001}


def test_a_cap_and_the_manifest(tmp_path: Path, bank: LedgerBank, clock: FakeClock) -> None:
    kit, pack, _ = treasury_kit(tmp_path, bank, clock, ["unix:alice"], max_amount=10_000_000)
    with kit:
        with kit.transaction("big"), pytest.raises(GateRefused, match="exceeds the cap"):
            pack.wire("ACME-GMBH", 20_000_000, "EUR", "x")
        described = {rule["name"]: rule["describes"] for rule in kit.guarantees()["gate"]["rules"]}
    assert described["duplicate_wire"] == (
        "no two wires with the same beneficiary, amount within 1 day on payments.wire"
    )
    assert described["wire_consensus"].startswith("3 of 3 validators (sanctions_clear, ")
    assert set(described) == {"wire_consensus", "wire_approval", "duplicate_wire", "max_value"}


def test_every_fault_point_of_a_checkout_with_a_wire(
    tmp_path: Path, saga_kit: AgentKit, saga_chaos: ChaosRunner
) -> None:
    bank = LedgerBank(tmp_path / "chaos-bank.db")
    pack = PaymentsPack(saga_kit, bank)

    def settle() -> None:
        pack.charge("cus_ana", 4_200, "EUR")
        pack.charge("cus_bob", 900, "EUR")
        pack.wire("ACME-GMBH", 5_100, "EUR", "settlement")  # the irreversible step, last

    report = saga_chaos.run(
        settle, world=bank.balances, reset=bank.reset, name="settle", fail=False
    )
    # Money that left by wire cannot come back: wherever the transaction fails after the wire
    # went out, the saga must wait for a human, and that is the only thing any point reports.
    assert report.failures
    for point in report.failures:
        assert point.outcome == "needs_human", point.label
        for broken in point.violations:
            assert "step #3 payments.wire" in broken.detail, (point.label, broken)
            assert broken.invariant in {
                "every committed effect is compensated after a rollback",
                "recovery settles the saga without a human",
            }
    clean = [point for point in report.results if not point.violations]
    assert len(clean) > 20
    kinds = {"exception", "compensation", "kill", "duplicate", "approval"}
    assert {point.kind for point in report.results} == kinds
    # Each failing compensation point fails after the wire went out: a human, as above.
    assert {point.kind for point in clean} == kinds - {"compensation"}


def test_every_fault_point_of_charges_alone(
    tmp_path: Path, saga_kit: AgentKit, saga_chaos: ChaosRunner
) -> None:
    bank = LedgerBank(tmp_path / "chaos-bank.db")
    pack = PaymentsPack(saga_kit, bank)

    def checkout() -> None:
        pack.charge("cus_ana", 4_200, "EUR")
        pack.charge("cus_ana", 900, "EUR")

    report = saga_chaos.run(checkout, world=bank.balances, reset=bank.reset, name="checkout")
    assert {point.kind for point in report.results} == {
        "exception",
        "compensation",
        "kill",
        "duplicate",
    }
    assert report.ok


def test_recent_charges_leave_out_refunded_and_older_ones(
    bank: LedgerBank, clock: FakeClock
) -> None:
    old = bank.charge("cus_ana", 100, "EUR", idempotency_key="k-old")
    clock.advance(100)
    kept = bank.charge("cus_ana", 200, "EUR", idempotency_key="k-kept")
    refunded = bank.charge("cus_bo", 300, "EUR", idempotency_key="k-refunded")
    bank.refund(refunded["charge_id"], idempotency_key="k-refund")
    recent = bank.recent_charges(START + 50)
    assert [c["charge_id"] for c in recent] == [kept["charge_id"]]
    assert old["charge_id"] not in [c["charge_id"] for c in bank.recent_charges(START + 50)]
    assert len(bank.recent_charges(START)) == 2
