"""The rule library, each rule driven through a real kit: the tool's body never runs on a refusal,
and the refusal names the rule and the value it saw."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, NewType, TypedDict

import pytest
from agent_saga import (
    REVERSIBLE,
    AgentKit,
    Allow,
    AllowTools,
    AllowValues,
    ArgumentsRefused,
    ArgumentTypes,
    Deny,
    DenyValues,
    FakeClock,
    Gate,
    GateRefused,
    Kind,
    Range,
    RateLimit,
    RequireApproval,
    Semantics,
    ToolCall,
    require_approval,
)
from agent_saga.testing import Ledger


def call(tool: str = "t", **args: Any) -> ToolCall:
    return ToolCall(tool, Semantics.COMPENSABLE, args, "saga", 1)


def refusal_of(kit: AgentKit, func: Any, *args: Any, **kwargs: Any) -> GateRefused:
    with kit.transaction("t"), pytest.raises(GateRefused) as info:
        func(*args, **kwargs)
    return info.value


def test_clinical_dose_range_refuses_before_the_prescription(home: Any) -> None:
    ledger = Ledger()
    with AgentKit(
        home=home,
        rules=[Range("dose_mg", 0.1, 50, tools="prescribe", unit="mg", name="dose_range")],
    ) as dosed:

        @dosed.tool(name="prescribe", semantics=REVERSIBLE)
        def prescribe(patient: str, dose_mg: float) -> str:
            ledger.record("prescribe", patient)
            return f"{dose_mg} mg"

        refused = refusal_of(dosed, prescribe, "p-1", 500)
        assert refused.rule == "dose_range"
        assert refused.reason == "dose_mg=500 is outside 0.1..50 mg"
        assert "refused by dose_range" in str(refused)
        assert refusal_of(dosed, prescribe, "p-1", 0.01).reason.startswith("dose_mg=0.01")
        assert "not a finite number" in refusal_of(dosed, prescribe, "p-1", "5").reason
        assert "not a finite number" in refusal_of(dosed, prescribe, "p-1", float("nan")).reason
        assert ledger.count("prescribe") == 0
        with dosed.transaction("ok"):
            assert prescribe("p-1", 50) == "50 mg"
            assert prescribe("p-1", 0.1) == "0.1 mg"
        assert ledger.count("prescribe") == 2
        refusals = [r for r in dosed.store.records() if r.kind == Kind.GATE_REFUSED]
        assert refusals[0].data["rule"] == "dose_range"
        assert refusals[0].data["args"] == {"patient": "p-1", "dose_mg": 500}


@pytest.mark.parametrize(
    ("angle", "volts", "refused_by"),
    [(45, 24.0, None), (181, 24.0, "angle"), (-181, 24.0, "angle"), (0, 30.5, "battery")],
)
def test_actuator_bounds(home: Any, angle: float, volts: float, refused_by: str | None) -> None:
    ledger = Ledger()
    rules = [
        Range("angle_deg", -180, 180, tools="arm.move", unit="deg", name="angle"),
        Range("battery_v", 20.0, 29.4, tools="arm.move", unit="V", name="battery"),
    ]
    with AgentKit(home=home, rules=rules) as kit:

        @kit.tool(name="arm.move", semantics=REVERSIBLE)
        def move(angle_deg: float, battery_v: float) -> None:
            ledger.record("move")

        if refused_by is None:
            with kit.transaction("t"):
                move(angle, volts)
            assert ledger.count("move") == 1
        else:
            refused = refusal_of(kit, move, angle, volts)
            assert refused.rule == refused_by
            assert str(angle if refused_by == "angle" else volts) in refused.reason
            assert ledger.count("move") == 0


def test_range_bounds_are_checked_when_declared() -> None:
    with pytest.raises(ValueError, match="above"):
        Range("x", 5, 1)
    with pytest.raises(ValueError, match="low or a high"):
        Range("x")
    with pytest.raises(ValueError, match="finite"):
        Range("x", float("nan"), 1)
    assert isinstance(Range("x", high=10).evaluate(call(x=-1e9)), Allow)
    assert isinstance(Range("x", 0, 1, tools=["other"]).evaluate(call(x=5)), Allow)
    assert Range("x", 0, 1, tools=["t"]).describe() == "x in 0..1 on t"


def test_allow_and_deny_lists() -> None:
    only = AllowTools(["search", "read"])
    assert isinstance(only.evaluate(call("search")), Allow)
    assert only.evaluate(call("wire")) == Deny("allow_tools", "tool wire is not on the allow list")
    currency = AllowValues("currency", ["EUR", "USD"], tools="pay")
    assert isinstance(currency.evaluate(call("pay", currency="EUR")), Allow)
    assert currency.evaluate(call("pay", currency="BTC")) == Deny(
        "allow_values", "currency='BTC' is not one of ['EUR', 'USD']"
    )
    assert isinstance(currency.evaluate(call("pay")), Deny)  # missing: cannot be on the list
    blocked = DenyValues("to.iban", ["KY00OFFSHORE"])
    assert blocked.evaluate(call(to={"iban": "KY00OFFSHORE"})) == Deny(
        "deny_values", "to.iban='KY00OFFSHORE' is on the deny list"
    )
    assert isinstance(blocked.evaluate(call(to={"iban": "DE44"})), Allow)
    flags = DenyValues("id", [1])
    assert isinstance(flags.evaluate(call(id=True)), Allow)  # True is not the id 1
    assert isinstance(flags.evaluate(call(id=1)), Deny)


def test_rate_limit_sliding_window() -> None:
    clock = FakeClock()
    limit = RateLimit(2, 60, tools="email.send", monotonic=clock.monotonic)
    send = call("email.send")
    assert isinstance(limit.evaluate(send), Allow)
    clock.advance(10)
    assert isinstance(limit.evaluate(send), Allow)
    refused = limit.evaluate(send)
    assert isinstance(refused, Deny)
    assert "2 calls per 60 s reached" in refused.reason
    assert "retry in 50.0 s" in refused.reason
    assert isinstance(limit.evaluate(call("other")), Allow)
    clock.advance(50)  # the first call leaves the window
    assert isinstance(limit.evaluate(send), Allow)


def test_rate_limit_per_saga(home: Any) -> None:
    clock = FakeClock()
    ledger = Ledger()
    with AgentKit(
        home=home, rules=[RateLimit(1, 3600, per="saga", monotonic=clock.monotonic)]
    ) as kit:

        @kit.tool(name="crm.note", semantics=REVERSIBLE)
        def note(text: str) -> None:
            ledger.record("note", text)

        with kit.transaction("a"):
            note("one")
            with pytest.raises(GateRefused, match="rate_limit"):
                note("two")
        with kit.transaction("b"):
            note("three")
    assert ledger.actions() == ["note", "note"]


def test_require_approval_when(home: Any) -> None:
    ledger = Ledger()
    big = require_approval(
        lambda c: c.arg("amount", 0) > 10_000, reason="wires above 10000 need a human"
    )
    assert isinstance(big.evaluate(call(amount=10)), Allow)
    assert big.evaluate(call("wire", amount=20_000)) == RequireApproval(
        "require_approval", "wire: wires above 10000 need a human"
    )
    raised = Gate([big]).evaluate(call(amount="lots"))  # the predicate raises: refused
    assert isinstance(raised, Deny)
    assert "TypeError" in raised.reason
    with AgentKit(home=home, rules=[big]) as kit:

        @kit.tool(name="bank.wire", compensate=lambda result: None)
        def wire(amount: int) -> None:
            ledger.record("wire", str(amount))

        refused = refusal_of(kit, wire, 50_000)
        assert refused.rule == "require_approval"
        assert "no approval channel is configured" in refused.reason
        with kit.transaction("small"):
            wire(500)
    assert ledger.actions() == ["wire"]


def test_require_approval_carries_approvers_and_quorum() -> None:
    rule = require_approval(lambda c: True, approvers=["cfo", "ceo"], quorum=2, name="board")
    decision = rule.evaluate(call("wire"))
    assert decision == RequireApproval("board", "wire: needs a human approval", ("cfo", "ceo"), 2)
    with pytest.raises(ValueError, match="quorum"):
        require_approval(lambda c: True, approvers=["cfo"], quorum=2)


def test_approval_predicate_must_return_a_bool() -> None:
    sloppy = require_approval(lambda c: c.arg("amount"))
    decision = sloppy.evaluate(call(amount=5))
    assert isinstance(decision, Deny)
    assert "not True or False" in decision.reason


class Item(TypedDict):
    sku: str
    qty: int


@dataclass
class Card:
    last4: str


UserId = NewType("UserId", int)


def test_argument_types_from_hints_refuse_before_the_body(home: Any) -> None:
    ledger = Ledger()
    with AgentKit(home=home, rules=[ArgumentTypes()]) as kit:

        @kit.tool(name="shop.order", semantics=REVERSIBLE)
        def order(
            user: UserId,
            items: list[Item],
            card: Card | None = None,
            speed: Literal["slow", "fast"] = "slow",
            tags: dict[str, int] | None = None,
            dims: tuple[float, float] = (1.0, 1.0),
        ) -> None:
            ledger.record("order")

        good: list[Item] = [{"sku": "A", "qty": 2}]
        cases: list[tuple[dict[str, Any], str]] = [
            ({"user": "7", "items": good}, "argument 'user' must be int, got str '7'"),
            ({"user": True, "items": good}, "argument 'user' must be int, got bool True"),
            (
                {"user": 7, "items": [{"sku": "A", "qty": "2"}]},
                "argument 'items'.0.qty must be int, got str '2'",
            ),
            ({"user": 7, "items": [{"sku": "A"}]}, "argument 'items'.0.qty is missing"),
            ({"user": 7, "items": good, "card": "4242"}, "argument 'card' must be"),
            ({"user": 7, "items": good, "speed": "warp"}, "must be one of ['slow', 'fast']"),
            ({"user": 7, "items": good, "tags": {"a": 1.5}}, "argument 'tags'.a must be int"),
            ({"user": 7, "items": good, "dims": (1.0,)}, "must have 2 items, got 1"),
        ]
        for kwargs, reason in cases:
            refused = refusal_of(kit, order, **kwargs)
            assert refused.rule == "argument_types"
            assert reason in refused.reason, (kwargs, refused.reason)
        assert ledger.count("order") == 0
        with kit.transaction("ok"):
            order(UserId(7), good, Card("4242"), "fast", {"a": 1}, (2, 3.5))
        assert ledger.count("order") == 1
        missing = refusal_of(kit, order, items=good)
        assert isinstance(missing, ArgumentsRefused)
        assert "'user'" in missing.reason  # the field is named


def test_argument_types_fail_closed_without_a_declaration_or_hints(home: Any) -> None:
    rule = ArgumentTypes()
    decision = rule.evaluate(call(x=1))
    assert isinstance(decision, Deny)
    assert "no tool declaration" in decision.reason
    with AgentKit(home=home, rules=[rule]) as kit:

        @kit.tool(name="bad.hints", semantics=REVERSIBLE)
        def bad(x: NoSuchType) -> None:  # type: ignore[name-defined]  # noqa: F821
            raise AssertionError("must not run")

        assert "cannot be resolved" in refusal_of(kit, bad, 1).reason

        @kit.tool(name="free", semantics=REVERSIBLE)
        def free(x, y: Any) -> None:  # type: ignore[no-untyped-def]
            pass

        with kit.transaction("t"):
            free(object(), object())
        spec = kit.runtime.tools.specs()[-1]
        assert rule.unchecked(spec) == ["x"]


@pytest.mark.parametrize(
    ("rule", "to", "currency", "reason"),
    [
        (AllowTools(["search"]), "DE44", "EUR", "tool bank.transfer is not on the allow list"),
        (AllowValues("currency", ["EUR"]), "DE44", "BTC", "currency='BTC' is not one of ['EUR']"),
        (DenyValues("to", ["KY00"]), "KY00", "EUR", "to='KY00' is on the deny list"),
    ],
)
def test_lists_refuse_through_the_engine(
    home: Any, rule: Any, to: str, currency: str, reason: str
) -> None:
    ledger = Ledger()
    with AgentKit(home=home, rules=[rule]) as kit:

        @kit.tool(name="bank.transfer", compensate=lambda result: None)
        def transfer(to: str, amount: int, currency: str) -> None:
            ledger.record("transfer")

        refused = refusal_of(kit, transfer, to, 10, currency)
        assert refused.rule == rule.name
        assert refused.reason == reason
    assert ledger.count("transfer") == 0
