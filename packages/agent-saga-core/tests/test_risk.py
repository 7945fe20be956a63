"""Risk scoring: thresholds, the shipped labelled set, the offline scorer's precision and recall on
the held-out half, and an optional embedding backend."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agent_saga import (
    REVERSIBLE,
    AgentKit,
    Allow,
    Deny,
    EmbeddingRiskScorer,
    GateRefused,
    RequireApproval,
    RiskRule,
    Semantics,
    ToolCall,
)
from agent_saga._gate.risk import LabelledCall, load_labelled, shipped_calls, split_halves
from agent_saga.testing import Ledger


def call(tool: str, **args: object) -> ToolCall:
    return ToolCall(tool, Semantics.COMPENSABLE, args, "s", 1)


@pytest.mark.parametrize(
    ("score", "expected"),
    [(0.0, Allow), (0.49, Allow), (0.5, RequireApproval), (0.89, RequireApproval), (0.9, Deny)],
)
def test_thresholds(score: float, expected: type) -> None:
    rule = RiskRule(lambda c: score, approve_at=0.5, deny_at=0.9, name="model")
    decision = rule.evaluate(call("t"))
    assert type(decision) is expected
    if expected is not Allow:
        assert f"{score:.2f}" in decision.reason  # type: ignore[union-attr]


def test_thresholds_are_checked() -> None:
    with pytest.raises(ValueError, match="approve_at"):
        RiskRule(lambda c: 0.0, approve_at=1.5)
    with pytest.raises(ValueError, match="deny_at"):
        RiskRule(lambda c: 0.0, deny_at=-1)


def test_the_shipped_set_is_large_balanced_and_well_formed() -> None:
    calls = shipped_calls()
    assert len(calls) >= 60
    dangerous = sum(c.dangerous for c in calls)
    assert 0.4 <= dangerous / len(calls) <= 0.6
    assert len({(c.tool, json.dumps(dict(c.args), sort_keys=True)) for c in calls}) == len(calls)
    assert all(c.note for c in calls)


def precision_recall(train: list[LabelledCall], test: list[LabelledCall]) -> tuple[float, float]:
    scorer = EmbeddingRiskScorer(train)
    flagged = [(scorer.score_args(c.tool, c.args) >= 0.5, c.dangerous) for c in test]
    tp = sum(1 for f, d in flagged if f and d)
    fp = sum(1 for f, d in flagged if f and not d)
    fn = sum(1 for f, d in flagged if not f and d)
    return tp / (tp + fp), tp / (tp + fn)


def test_precision_and_recall_on_the_held_out_half() -> None:
    train, held_out = split_halves(shipped_calls())
    assert len(held_out) >= 30
    precision, recall = precision_recall(train, held_out)
    assert recall >= 0.9
    assert precision >= 0.8
    precision, recall = precision_recall(held_out, train)  # and the other way round
    assert recall >= 0.9
    assert precision >= 0.8


def test_the_scorer_in_a_kit_asks_for_approval_of_a_dangerous_command(home: Path) -> None:
    ledger = Ledger()
    with AgentKit(home=home, rules=[EmbeddingRiskScorer(deny_at=0.95)]) as kit:

        @kit.tool(name="shell.run", semantics=REVERSIBLE)
        def run(command: str) -> None:
            ledger.record("run", command)

        with kit.transaction("t"):
            run("git log --oneline")
            with pytest.raises(GateRefused) as info:
                run("rm -rf / --no-preserve-root")
        assert info.value.rule == "risk_score"
        guarantees = kit.guarantees()
        assert guarantees["gate"]["scorers"][0]["name"] == "risk_score"
        assert "45 dangerous and 45 benign" in guarantees["gate"]["scorers"][0]["describes"]
        assert any(
            "risk score can only add" in line for line in guarantees["enforced_before_effect"]
        )
    assert ledger.actions() == ["run"]


def test_an_embedding_backend_can_replace_the_hashed_features() -> None:
    def embed(text: str) -> list[float]:  # a stand-in model: two hand-made dimensions
        return [float("DROP" in text or "rm -rf" in text), float("SELECT" in text or " ls" in text)]

    examples = [
        LabelledCall("db", {"sql": "DROP TABLE x"}, True),
        LabelledCall("db", {"sql": "SELECT 1"}, False),
    ]
    scorer = EmbeddingRiskScorer(examples, embed=embed)
    assert scorer.score(call("db", sql="DROP TABLE users")) == 1.0
    assert scorer.score(call("db", sql="SELECT * FROM t")) == 0.0
    assert "embedding function" in scorer.describe()


def test_a_scorer_needs_dangerous_examples_and_valid_rows() -> None:
    with pytest.raises(ValueError, match="dangerous example"):
        EmbeddingRiskScorer([LabelledCall("t", {}, False)])
    with pytest.raises(ValueError, match="line 1"):
        load_labelled(['{"tool": "t", "args": {}, "label": "maybe", "note": ""}'])
