"""One test per "Gate" line of the failure-modes list: each was reproduced in a published
agent-safety library, and must never happen here.

1. A risk scorer's "needs approval" was ignored and the call skipped every rule ($5M wire).
2. Schema rules produced a "block" decision that nothing enforced.
3. Tool semantics guessed from name substrings (``transfer_budget`` reversible).
4. ``halt`` wrote a switch file running agents never read; ``status()`` kept saying ready.
5. A readiness integrity check compared ``len(sha256_hex) == 64`` (always true).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agent_saga import (
    IRREVERSIBLE,
    REVERSIBLE,
    AgentKit,
    ArgumentsRefused,
    ArgumentTypes,
    Budget,
    Deny,
    EmbeddingRiskScorer,
    FileBudgetStore,
    Gate,
    GateRefused,
    HaltedError,
    Kind,
    MaxValue,
    RequireApproval,
    RiskRule,
    Rule,
    SagaRolledBack,
    Semantics,
    ToolCall,
    tool,
    tool_spec,
    verify_file,
)
from agent_saga.testing import Ledger


def wire_call(amount: int) -> ToolCall:
    return ToolCall("bank.wire", Semantics.COMPENSABLE, {"to": "KY-1", "amount": amount}, "s", 1)


# 1 -- a flagged call never skips a rule, and "needs approval" is enforced -----------------------


def test_a_flagged_five_million_wire_does_not_run(home: Path) -> None:
    ledger = Ledger()
    scorer = RiskRule(lambda call: 0.97, name="fraud_model")  # flags everything
    with AgentKit(
        home=home, rules=[scorer, MaxValue(10_000, tools=frozenset({"bank.wire"}))]
    ) as kit:

        @kit.tool(name="bank.wire", compensate=lambda result: None)
        def wire(to: str, amount: int) -> None:
            ledger.record("wire", str(amount))

        with kit.transaction("t"):
            with pytest.raises(GateRefused) as info:
                wire("KY-1", 5_000_000)
            # the cap still decided: the scorer's flag did not short-circuit the rules
            assert info.value.rule == "max_value"
            with pytest.raises(GateRefused) as flagged:
                wire("KY-1", 500)  # within the cap, but flagged: approval is enforced
            assert flagged.value.rule == "fraud_model"
            assert "no approval channel" in flagged.value.reason
    assert ledger.count("wire") == 0


@pytest.mark.parametrize("position", ["first", "last"])
def test_scorer_position_never_matters(position: str) -> None:
    flag = RiskRule(lambda call: 0.9, name="risk")
    cap = MaxValue(10_000)
    rules: list[Rule] = [flag, cap] if position == "first" else [cap, flag]
    assert Gate(rules).evaluate(wire_call(5_000_000)) == Deny(
        "max_value", "amount=5000000 exceeds the cap of 10000"
    )
    assert isinstance(Gate(rules).evaluate(wire_call(50)), RequireApproval)


@pytest.mark.parametrize("score", [float("nan"), -0.1, 1.5, "0.1", None, True])
def test_a_scorer_returning_junk_refuses(score: Any) -> None:
    decision = Gate([RiskRule(lambda call: score, name="junk")]).evaluate(wire_call(1))
    assert isinstance(decision, Deny)
    assert decision.rule == "junk"


def test_a_scorer_that_raises_refuses() -> None:
    def broken(call: ToolCall) -> float:
        raise RuntimeError("model file missing")

    decision = Gate([RiskRule(broken)]).evaluate(wire_call(1))
    assert isinstance(decision, Deny)
    assert "model file missing" in decision.reason


def test_the_shipped_scorer_flags_the_wire_and_lets_payroll_through() -> None:
    scorer = EmbeddingRiskScorer()
    big = wire_call(5_000_000)._replace(
        tool="bank.wire", args={"to": "NEW-KY-9", "amount": 5_000_000, "memo": "urgent, CEO"}
    )
    small = big._replace(args={"to": "PAYROLL-GB", "amount": 2800, "memo": "salary"})
    assert isinstance(Gate([scorer]).evaluate(big), RequireApproval)
    assert Gate([scorer]).evaluate(small).rank == 0


def test_irreversible_needs_approval_even_when_the_score_is_zero(home: Path) -> None:
    ledger = Ledger()
    with AgentKit(home=home, rules=[RiskRule(lambda call: 0.0, name="calm")]) as kit:

        @kit.tool(name="bank.wire", semantics=IRREVERSIBLE)
        def wire(amount: int) -> None:
            ledger.record("wire")

        with kit.transaction("t"), pytest.raises(GateRefused, match="IRREVERSIBLE"):
            wire(5_000_000)
    assert ledger.count("wire") == 0


# 2 -- schema refusals are enforced, not just computed ---------------------------------------------


def test_schema_refusals_stop_the_call(home: Path) -> None:
    ledger = Ledger()
    with AgentKit(home=home, rules=[ArgumentTypes()]) as kit:

        @kit.tool(name="pay", semantics=REVERSIBLE)
        def pay(amount: int, currency: str) -> None:
            ledger.record("pay")

        with kit.transaction("t"):
            with pytest.raises(GateRefused, match="argument 'amount' must be int"):
                pay("1000000", "EUR")  # type: ignore[arg-type]
            with pytest.raises(ArgumentsRefused, match="'currency'"):
                pay(5)  # type: ignore[call-arg]
        refused = [r.data["rule"] for r in kit.store.records() if r.kind == Kind.GATE_REFUSED]
    assert refused == ["argument_types", "signature"]
    assert ledger.count("pay") == 0


# 3 -- semantics are declared, never guessed ------------------------------------------------------


@pytest.mark.parametrize("name", ["transfer_budget", "get_wire", "undo_payment", "read_and_delete"])
def test_semantics_are_never_guessed_from_the_name(name: str, home: Path) -> None:
    def body(amount: int) -> None:
        pass

    body.__name__ = body.__qualname__ = name
    spec = tool_spec(tool(body))
    assert spec is not None
    assert spec.semantics is Semantics.IRREVERSIBLE  # the strictest, until declared otherwise
    with AgentKit(home=home) as kit:
        wrapped = kit.tool(body)
        with kit.transaction("t"), pytest.raises(GateRefused, match="IRREVERSIBLE"):
            wrapped(1)


# 4 -- `agent-saga halt` in another process stops a running agent ---------------------------------


def test_halt_from_the_command_line_stops_a_running_agent(home: Path) -> None:
    ledger = Ledger()
    with AgentKit(home=home) as kit:

        @kit.tool(name="step", semantics=REVERSIBLE)
        def step(n: int) -> None:
            ledger.record("step")

        with pytest.raises(SagaRolledBack) as info, kit.transaction("long job"):
            step(1)
            assert kit.status().ready
            cli = "import sys; from agent_saga.cli import main; sys.exit(main())"
            subprocess.run(
                [sys.executable, "-c", cli, "--home", str(home), "halt", "--reason", "incident 9"],
                check=True,
                capture_output=True,
            )
            step(2)
        assert isinstance(info.value.cause, HaltedError)
        assert "incident 9" in str(info.value.cause)
        status = kit.status()
        assert not status.ready
        assert "halted: incident 9" in status.reasons
    assert ledger.count("step") == 1


# 5 -- readiness reads the data it vouches for ----------------------------------------------------


def test_status_reads_the_budget_state_not_its_shape(home: Path) -> None:
    store = FileBudgetStore(home)
    budget = Budget("ops", 100, store=store)
    with AgentKit(home=home, rules=[budget]) as kit:

        @kit.tool(name="pay", semantics=REVERSIBLE)
        def pay(amount: int) -> None:
            pass

        with kit.transaction("t"):
            pay(10)
        assert kit.status().ready
        path = home / "budgets" / "ops.json"
        text = path.read_text()
        path.write_text("x" * len(text))  # same size, not a state
        status = kit.status()
        assert not status.ready
        assert "not a budget state" in status.checks["gate"]


def test_verify_compares_hashes_not_their_length(home: Path) -> None:
    with AgentKit(home=home) as kit:

        @kit.tool(name="pay", semantics=REVERSIBLE)
        def pay(amount: int) -> None:
            pass

        with kit.transaction("t"):
            pay(10)
        assert kit.verify().ok
    log = home / "log.jsonl"
    lines = log.read_bytes().split(b"\n")
    record = json.loads(lines[1])
    flipped = record["hash"][:-1] + ("0" if record["hash"][-1] != "0" else "1")
    lines[1] = lines[1].replace(record["hash"].encode(), flipped.encode())
    log.write_bytes(b"\n".join(lines))
    report = verify_file(log)
    assert not report.ok  # same length, wrong hash
    assert report.error is not None
