"""N-of-M consensus: 3/3 before a wire above a threshold; a refusal, an exception or a timeout
is a "no"; every vote is in the saga's log."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from agent_saga import (
    AgentKit,
    Allow,
    Consensus,
    Deny,
    GateRefused,
    Kind,
    Semantics,
    SequentialIds,
    ToolCall,
)
from agent_saga.testing import Ledger


def approve(call: ToolCall) -> bool:
    return True


def limits_desk(call: ToolCall) -> object:
    return True if call.arg("amount") < 5_000_000 else Deny("desk", "above the desk's limit")


def sanctions(call: ToolCall) -> object:
    return call.arg("to") != "KY-SANCTIONED" or "beneficiary is on a sanctions list"


def wire_kit(home: Path, ledger: Ledger, *validators: Any, **options: Any) -> tuple[AgentKit, Any]:
    rule = Consensus(
        list(validators),
        when=lambda c: c.arg("amount", 0) > 10_000,
        tools="bank.wire",
        **options,
    )
    kit = AgentKit(home=home, rules=[rule], ids=SequentialIds())

    @kit.tool(name="bank.wire", compensate=lambda result: None)
    def wire(to: str, amount: int) -> str:
        ledger.record("wire", str(amount))
        return to

    return kit, wire


def votes(kit: AgentKit) -> list[dict[str, Any]]:
    return [dict(r.data) for r in kit.store.records() if r.kind == Kind.GATE_VOTE]


def test_three_of_three_approve_a_large_wire_and_each_vote_is_logged(home: Path) -> None:
    ledger = Ledger()
    kit, wire = wire_kit(home, ledger, approve, limits_desk, sanctions)
    with kit:
        with kit.transaction("small"):
            wire("ACME", 500)  # below the threshold: no vote
        assert votes(kit) == []
        with kit.transaction("large"):
            wire("ACME", 2_000_000)
        logged = votes(kit)
        assert [(v["validator"], v["vote"]) for v in logged] == [
            ("approve", "approve"),
            ("limits_desk", "approve"),
            ("sanctions", "approve"),
        ]
        assert {v["tool"] for v in logged} == {"bank.wire"}
        vote_records = [r for r in kit.store.records() if r.kind == Kind.GATE_VOTE]
        assert {r.saga for r in vote_records} == {"saga-0002"}
    assert ledger.count("wire") == 2


@pytest.mark.parametrize(
    ("to", "amount", "who", "why"),
    [
        ("ACME", 9_000_000, "limits_desk", "above the desk's limit"),
        ("KY-SANCTIONED", 20_000, "sanctions", "sanctions list"),
    ],
)
def test_one_refusal_stops_the_wire(home: Path, to: str, amount: int, who: str, why: str) -> None:
    ledger = Ledger()
    kit, wire = wire_kit(home, ledger, approve, limits_desk, sanctions)
    with kit, kit.transaction("t"), pytest.raises(GateRefused) as info:
        wire(to, amount)
    refused = info.value
    assert refused.rule == "consensus"
    assert refused.reason.startswith("2 of 3 validators approved, 3 required")
    assert f"{who}: " in refused.reason
    assert why in refused.reason
    assert ledger.count("wire") == 0
    assert [v["vote"] for v in votes(kit)].count("refuse") == 1


def test_a_validator_that_raises_or_times_out_is_a_refusal(home: Path) -> None:
    ledger = Ledger()
    release = threading.Event()

    def offline(call: ToolCall) -> bool:
        raise ConnectionError("fraud service unreachable")

    def slow(call: ToolCall) -> bool:
        release.wait(5)
        return True

    kit, wire = wire_kit(home, ledger, approve, offline, slow, timeout=0.05)
    try:
        with kit, kit.transaction("t"), pytest.raises(GateRefused) as info:
            wire("ACME", 50_000)
    finally:
        release.set()
    reason = info.value.reason
    assert "1 of 3 validators approved" in reason
    assert "offline: raised ConnectionError: fraud service unreachable" in reason
    assert "slow: no vote within 0.05 s" in reason
    assert ledger.count("wire") == 0


def test_quorum_two_of_three(home: Path) -> None:
    ledger = Ledger()

    def no(call: ToolCall) -> bool:
        return False

    kit, wire = wire_kit(home, ledger, approve, approve, no, required=2)
    with kit, kit.transaction("t"):
        wire("ACME", 50_000)
    assert ledger.count("wire") == 1
    with kit:
        assert [v["validator"] for v in votes(kit)] == ["approve", "approve#2", "no"]


@pytest.mark.parametrize("answer", [1, "yes", None, {"approved": True}, Allow()])
def test_only_true_or_allow_approves(answer: Any) -> None:
    rule = Consensus([lambda call: answer])
    decision = rule.evaluate(ToolCall("t", Semantics.COMPENSABLE, {}, "s", 1))
    assert isinstance(decision, Allow) is (answer is True or isinstance(answer, Allow))


class RemoteValidator:
    """A validator behind a service that can be down; its health() says so."""

    name = "remote"

    def __init__(self) -> None:
        self.up = True

    def __call__(self, call: ToolCall) -> bool:
        if not self.up:
            raise ConnectionError("remote validator down")
        return True

    def health(self) -> list[str]:
        return [] if self.up else ["cannot reach the validation service"]


def test_unreachable_validator_makes_status_not_ready(home: Path) -> None:
    remote = RemoteValidator()
    with AgentKit(home=home, rules=[Consensus([remote, approve])]) as kit:
        assert kit.status().ready
        remote.up = False
        status = kit.status()
        assert not status.ready
        assert status.checks["gate"] == (
            "consensus: validator remote: cannot reach the validation service"
        )
        manifest = kit.guarantees()
        assert manifest["gate"]["consensus"][0]["describes"].startswith(
            "2 of 2 validators (remote, approve) must approve"
        )


def test_bad_declarations() -> None:
    with pytest.raises(ValueError, match="at least one"):
        Consensus([])
    with pytest.raises(ValueError, match="between 1 and 2"):
        Consensus([approve, approve], required=3)
    with pytest.raises(TypeError, match="not callable"):
        Consensus({"x": 1})  # type: ignore[dict-item]
