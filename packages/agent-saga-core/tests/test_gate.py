"""The gate (first version), the kill switch, status() and the guarantees manifest."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from agent_saga import (
    REVERSIBLE,
    AgentKit,
    Allow,
    ArgumentsRefused,
    Deny,
    DenyTools,
    Gate,
    GateRefused,
    HaltedError,
    Kind,
    MaxValue,
    MemoryKillSwitch,
    RequireApproval,
    SagaRolledBack,
    Semantics,
    ToolCall,
    tool,
    tool_spec,
)
from agent_saga._gate.decisions import strictest
from agent_saga.testing import Ledger


def call(
    tool_name: str = "t", semantics: Semantics = Semantics.COMPENSABLE, **args: Any
) -> ToolCall:
    return ToolCall(tool_name, semantics, args, "saga", 1)


class Fixed:
    def __init__(self, decision: Any, name: str = "fixed") -> None:
        self.decision = decision
        self.name = name

    def evaluate(self, call: ToolCall) -> Any:
        return self.decision


class Raises:
    name = "raises"

    def evaluate(self, call: ToolCall) -> Any:
        raise RuntimeError("rule bug")


DECISIONS = [Allow(), RequireApproval("r", "needs a human"), Deny("d", "no")]


@pytest.mark.parametrize("first", DECISIONS)
@pytest.mark.parametrize("second", DECISIONS)
def test_strictest_wins_in_any_order(first: Any, second: Any) -> None:
    decision = Gate([Fixed(first), Fixed(second)]).evaluate(call())
    assert decision.rank == max(first.rank, second.rank)
    assert strictest(first, second).rank == strictest(second, first).rank


def test_adding_a_rule_never_loosens() -> None:
    base = Gate([Fixed(Deny("d", "no"))])
    for extra in [*DECISIONS, "allow", None, True]:
        assert isinstance(base.with_rule(Fixed(extra)).evaluate(call()), Deny)


@pytest.mark.parametrize("junk", ["allow", None, True, 1, {"decision": "allow"}])
def test_rule_returning_junk_denies(junk: Any) -> None:
    decision = Gate([Fixed(junk, "junk")]).evaluate(call())
    assert isinstance(decision, Deny)
    assert decision.rule == "junk"


def test_rule_that_raises_denies() -> None:
    decision = Gate([Raises()]).evaluate(call())
    assert isinstance(decision, Deny)
    assert "rule bug" in decision.reason


def test_irreversible_needs_approval_even_with_allow_rules() -> None:
    decision = Gate([Fixed(Allow())]).evaluate(call(semantics=Semantics.IRREVERSIBLE))
    assert isinstance(decision, RequireApproval)


def test_gate_rejects_objects_that_are_not_rules() -> None:
    with pytest.raises(TypeError, match="not a gate rule"):
        Gate([lambda c: Allow()])  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("amount", "allowed"),
    [(10, True), (1000, True), (1000.01, False), ("1000", False), (None, False), (True, False)],
)
def test_max_value(amount: Any, allowed: bool) -> None:
    rule = MaxValue(1000, tools=frozenset({"pay"}))
    decision = rule.evaluate(call("pay", amount=amount))
    assert isinstance(decision, Allow) is allowed
    if not allowed:
        assert isinstance(decision, Deny)
        assert str(amount) in decision.reason
    assert isinstance(rule.evaluate(call("other", amount=10**9)), Allow)


def test_dotted_paths() -> None:
    c = call(order={"items": [{"qty": 3}]})
    assert c.arg("order.items.0.qty") == 3
    assert c.arg("order.items.5.qty", "missing") == "missing"
    assert MaxValue(2, path="order.items.0.qty").evaluate(c) == Deny(
        "max_value", "order.items.0.qty=3 exceeds the cap of 2"
    )


def test_refusal_raises_is_logged_and_body_never_runs(home: Path) -> None:
    ledger = Ledger()
    with AgentKit(home=home, rules=[DenyTools(frozenset({"db.drop"}))]) as kit:

        @kit.tool(name="db.drop", compensate=lambda result: None)
        def drop(table: str) -> None:
            ledger.record("drop", table)

        with kit.transaction("t"):
            with pytest.raises(GateRefused) as info:
                drop("users")
            assert info.value.rule == "deny_tools"
            assert "deny list" in info.value.reason
        refusals = [r for r in kit.store.records() if r.kind == Kind.GATE_REFUSED]
    assert ledger.count("drop") == 0
    assert refusals[0].data["args"] == {"table": "users"}
    assert refusals[0].data["rule"] == "deny_tools"


def test_call_that_does_not_fit_the_signature_is_refused(kit: AgentKit) -> None:
    ledger = Ledger()

    @kit.tool(name="sig.step", semantics=REVERSIBLE)
    def step(a: int) -> None:
        ledger.record("step")

    with kit.transaction("t"):
        with pytest.raises(ArgumentsRefused):
            step(1, 2)  # type: ignore[call-arg]
        with pytest.raises(TypeError):
            step(b=1)  # type: ignore[call-arg]
    assert ledger.count("step") == 0


def test_unregistered_named_compensation_refuses_before_the_effect(kit: AgentKit) -> None:
    ledger = Ledger()

    @kit.tool(name="pay.charge", compensate="pay.refund.never-registered")
    def charge(amount: int) -> None:
        ledger.record("charge")

    with pytest.raises(SagaRolledBack) as info, kit.transaction("t"):
        charge(1)
    assert isinstance(info.value.cause, GateRefused)
    assert "not registered" in info.value.cause.reason
    assert ledger.count("charge") == 0
    assert not kit.status().ready
    assert "pay.refund.never-registered" in kit.status().checks["compensators"]


def test_semantics_are_not_guessed_from_names() -> None:
    @tool
    def transfer_budget(amount: int) -> None: ...

    @tool
    def get_balance() -> int:
        return 0

    for func in (transfer_budget, get_balance):
        spec = tool_spec(func)
        assert spec is not None
        assert spec.semantics is Semantics.IRREVERSIBLE


def test_halt_from_another_kit_stops_a_running_agent(home: Path) -> None:
    ledger = Ledger()
    with AgentKit(home=home) as agent, AgentKit(home=home) as operator:

        @agent.tool(name="ks.step", semantics=REVERSIBLE)
        def step(n: int) -> None:
            ledger.record("step", str(n))

        with pytest.raises(SagaRolledBack) as info, agent.transaction("long job"):
            step(1)
            assert agent.status().ready
            operator.halt("runaway agent")
            step(2)
        assert isinstance(info.value.cause, HaltedError)
        assert "runaway agent" in str(info.value.cause)
        assert ledger.actions() == ["step"]
        status = agent.status()
        assert not status.ready
        assert "halted: runaway agent" in status.reasons
        operator.resume()
        assert agent.status().ready
        with agent.transaction("after resume"):
            step(3)
        assert ledger.count("step") == 2
        kinds = [r.kind for r in agent.store.records()]
        assert Kind.HALT in kinds
        assert Kind.RESUME in kinds


def test_unreadable_kill_switch_fails_closed(home: Path) -> None:
    with AgentKit(home=home) as kit:

        @kit.tool(name="ks.read", semantics=REVERSIBLE)
        def read() -> int:
            return 1

        (home / "HALT").mkdir()  # reading it now fails with an OS error
        with pytest.raises(HaltedError, match="unreadable"), kit.transaction("t"):
            read()
        status = kit.status()
        assert not status.ready
        assert status.checks["kill_switch"] == "unreadable"


def test_garbled_kill_switch_file_counts_as_halted(home: Path) -> None:
    with AgentKit(home=home) as kit:
        (home / "HALT").write_bytes(b"\x00garbage")
        assert not kit.status().ready
        with pytest.raises(HaltedError), kit.transaction("t"):
            pass


def test_status_reads_the_log_not_a_constant(home: Path) -> None:
    with AgentKit(home=home) as kit:

        @kit.tool(name="st.read", semantics=REVERSIBLE)
        def read() -> int:
            return 1

        with kit.transaction("t"):
            read()
        assert kit.status().ready
        os.truncate(home / "log.jsonl", 10)
        status = kit.status()
        assert not status.ready
        assert "shrank" in status.checks["log_store"]


def test_memory_kill_switch(home: Path) -> None:
    switch = MemoryKillSwitch()
    with AgentKit(home=home, store="memory", kill_switch=switch) as kit:
        switch.halt("test", at=0)
        assert not kit.status().ready
        assert not (home / "HALT").exists()


def test_guarantees_follow_configuration(home: Path) -> None:
    with AgentKit(home=home, rules=[MaxValue(50, path="dose_mg")]) as kit:

        @kit.tool(name="gm.local", compensate=lambda result: None)
        def local(x: int) -> int:
            return x

        manifest = kit.guarantees()
        json.dumps(manifest)  # JSON-serialisable
        assert manifest["manifest_version"] == 1
        assert manifest["gate"]["rules"][0]["describes"] == "dose_mg <= 50 on every tool"
        rows = {row["tool"]: row for row in manifest["compensators"]["tools"]}
        assert rows["gm.local"]["compensation"] == "in-process"
        assert rows["gm.local"]["recoverable"] is False
        assert any("gm.local" in line for line in manifest["not_claimed"])
        assert any(
            "fsynced before the effect" in line for line in manifest["enforced_before_effect"]
        )
    with AgentKit(home=home, store="memory", fast_path=False) as kit:
        manifest = kit.guarantees()
        assert not any("fsynced" in line for line in manifest["enforced_before_effect"])
        assert not any("buffered" in line for line in manifest["not_claimed"])


def test_compensations_still_run_while_halted(home: Path) -> None:
    """The manifest says the kill switch stops new effects, not undo."""
    ledger = Ledger()
    with AgentKit(home=home) as kit:

        def refund(result: int) -> None:
            ledger.record("refund", str(result))

        @kit.tool(name="ks.charge", compensate=refund)
        def charge(n: int) -> int:
            ledger.record("charge", str(n))
            return n

        with pytest.raises(SagaRolledBack) as info, kit.transaction("t"):
            charge(1)
            kit.halt("stop now")
            charge(2)
        assert isinstance(info.value.cause, HaltedError)
        assert ledger.actions() == ["charge", "refund"]
        assert any("not undo" in line for line in kit.guarantees()["not_claimed"])
        kit.resume()
