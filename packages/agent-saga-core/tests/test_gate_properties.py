"""Monotonicity of the gate, as properties over random rule sets, scorers and calls.

Adding any rule or scorer never turns ``Deny`` or ``RequireApproval`` into ``Allow`` and never
turns ``Deny`` into ``RequireApproval``; the order of the rules does not change the outcome's
strictness; and the engine runs the tool exactly when the gate allows the call.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent_saga import (
    AgentKit,
    Allow,
    AllowTools,
    AllowValues,
    Budget,
    Consensus,
    Deny,
    DenyTools,
    DenyValues,
    EmbeddingRiskScorer,
    Gate,
    GateRefused,
    MaxValue,
    Range,
    RequireApproval,
    RiskRule,
    Rule,
    Semantics,
    ToolCall,
    require_approval,
)
from agent_saga.testing import Ledger
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

TOOLS = ["bank.wire", "prescribe", "arm.move", "shell.run"]
SHARED_SCORER = EmbeddingRiskScorer()


class Fixed:
    def __init__(self, decision: object, name: str) -> None:
        self.decision, self.name = decision, name

    def evaluate(self, call: ToolCall) -> Any:
        return self.decision

    def __repr__(self) -> str:
        return f"Fixed({self.decision!r})"


class Raising:
    name = "raising"

    def evaluate(self, call: ToolCall) -> Any:
        raise ValueError("bug in a rule")


numbers = st.one_of(
    st.integers(-(10**9), 10**9),
    st.floats(allow_nan=True, allow_infinity=True),
    st.just(True),
)
values = st.one_of(numbers, st.text(max_size=8), st.none())
decisions = st.sampled_from(
    [Allow(), RequireApproval("r", "human"), Deny("d", "no"), "allow", None, 1, Allow]
)
scores = st.one_of(st.floats(0, 1), st.floats(allow_nan=True), st.text(max_size=3), st.none())
thresholds = st.floats(0, 1)


@st.composite
def scorers(draw: st.DrawFn) -> Rule:
    score: Any = draw(scores)
    approve_at = draw(thresholds)
    deny_at = draw(st.none() | thresholds)
    return RiskRule(lambda call: score, approve_at=approve_at, deny_at=deny_at, name="scored")


def voting(answers: list[object], required: int) -> Consensus:
    """A consensus rule whose validators answer fixed values."""

    def validator(answer: object) -> Callable[[ToolCall], object]:
        return lambda call: answer

    return Consensus([validator(a) for a in answers], required=min(required, len(answers)))


def rules() -> st.SearchStrategy[Rule]:
    paths = st.sampled_from(["amount", "dose_mg", "to.iban", "missing"])
    tool_sets = st.none() | st.sets(st.sampled_from(TOOLS), max_size=2).map(frozenset)
    return st.one_of(
        st.builds(Fixed, decisions, st.just("fixed")),
        st.just(Raising()),
        st.builds(MaxValue, st.floats(0, 1e7), paths, tool_sets),
        st.builds(
            lambda p, lo, span: Range(p, lo, lo + span),
            paths,
            st.floats(-1e6, 1e6),
            st.floats(0, 1e6),
        ),
        st.builds(DenyTools, st.sets(st.sampled_from(TOOLS), max_size=2).map(frozenset)),
        st.builds(AllowTools, st.sets(st.sampled_from(TOOLS), min_size=1, max_size=3)),
        st.builds(AllowValues, paths, st.lists(values, max_size=3)),
        st.builds(DenyValues, paths, st.lists(values, max_size=3)),
        st.builds(
            lambda limit: require_approval(lambda c: c.arg("amount", 0) > limit),
            st.integers(0, 10**6),
        ),
        scorers(),
        st.just(SHARED_SCORER),
        st.builds(
            lambda limit, path: Budget("b", limit, amount=path, store="memory"),
            st.integers(0, 10**6),
            paths,
        ),
        st.builds(
            voting,
            st.lists(st.sampled_from([True, False, None, Allow()]), min_size=1, max_size=3),
            st.integers(1, 3),
        ),
    )


@st.composite
def calls(draw: st.DrawFn) -> ToolCall:
    args = {
        "amount": draw(values),
        "dose_mg": draw(values),
        "to": {"iban": draw(st.sampled_from(["DE44", "KY00", "GB29"]))},
    }
    return ToolCall(
        draw(st.sampled_from(TOOLS)), draw(st.sampled_from(list(Semantics))), args, "saga", 1
    )


@settings(max_examples=400, deadline=None)
@given(st.lists(rules(), max_size=6), rules(), st.integers(0, 6), calls())
def test_adding_a_rule_or_scorer_never_loosens(
    base: list[Rule], extra: Rule, where: int, call: ToolCall
) -> None:
    before = Gate(base).evaluate(call)
    after = Gate([*base[:where], extra, *base[where:]]).evaluate(call)
    assert after.rank >= before.rank
    if isinstance(before, Deny):
        assert isinstance(after, Deny)
    if isinstance(before, RequireApproval):
        assert not isinstance(after, Allow)


@settings(max_examples=200, deadline=None)
@given(st.lists(rules(), max_size=6), st.randoms(use_true_random=False), calls())
def test_order_does_not_change_strictness(base: list[Rule], rnd: Any, call: ToolCall) -> None:
    shuffled = list(base)
    rnd.shuffle(shuffled)
    single = [Gate([rule]).evaluate(call).rank for rule in base]
    floor = 1 if call.semantics is Semantics.IRREVERSIBLE else 0
    expected = max([floor, *single])
    assert Gate(base).evaluate(call).rank == expected
    assert Gate(shuffled).evaluate(call).rank == expected


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(rules(), max_size=4), calls())
def test_the_tool_runs_exactly_when_the_gate_allows(base: list[Rule], call: ToolCall) -> None:
    ledger = Ledger()
    with (
        tempfile.TemporaryDirectory() as tmp,
        AgentKit(home=Path(tmp), store="memory", rules=base) as kit,
    ):
        semantics = call.semantics
        options: dict[str, Any] = {"semantics": semantics}
        if semantics is Semantics.COMPENSABLE:
            options["compensate"] = lambda result: None

        def body(amount: Any, dose_mg: Any, to: Any) -> None:
            ledger.record("ran")

        wrapped = kit.tool(body, name=call.tool, **options)
        expected = Gate(base).evaluate(call._replace(spec=None))
        with kit.transaction("t"):
            try:
                wrapped(**call.args)
            except GateRefused:
                assert not isinstance(expected, Allow)
            else:
                assert isinstance(expected, Allow)
    assert ledger.count("ran") == (1 if isinstance(expected, Allow) else 0)
