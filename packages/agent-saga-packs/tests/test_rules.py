"""DuplicateWithin: the rule the core lacks, written to its Rule protocol."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pytest
from agent_saga import AgentKit, CompensatorRegistry, GateRefused, Rule, Semantics, ToolCall
from agent_saga_packs import DuplicateWithin


def call(**args: Any) -> ToolCall:
    return ToolCall("payments.wire", Semantics.IRREVERSIBLE, args, "saga", 1)


class Log:
    def __init__(self, *effects: Mapping[str, Any]) -> None:
        self.effects = list(effects)
        self.asked: list[float] = []

    def __call__(self, since: float) -> Iterable[Mapping[str, Any]]:
        self.asked.append(since)
        return [e for e in self.effects if e["at"] >= since]


def test_it_is_a_core_rule() -> None:
    rule = DuplicateWithin(("to",), 60, recent=Log())
    assert isinstance(rule, Rule)


def test_the_same_fields_within_the_window_are_refused() -> None:
    log = Log({"id": "w1", "to": "ACME", "amount": 100, "at": 950.0})
    rule = DuplicateWithin(("to", "amount"), 100, recent=log, clock=lambda: 1_000.0, what="wire")
    refused = rule.evaluate(call(to=" acme", amount=100.0))
    assert refused.rank == 2
    assert refused.reason == (  # type: ignore[union-attr]
        "a wire with to=' acme', amount=100.0 was already made within the last 100 s (w1)"
    )
    assert log.asked == [900.0]
    assert rule.evaluate(call(to="ACME", amount=101)).rank == 0
    assert rule.evaluate(call(to="OTHER", amount=100)).rank == 0
    later = DuplicateWithin(("to", "amount"), 30, recent=log, clock=lambda: 1_000.0)
    assert later.evaluate(call(to="ACME", amount=100)).rank == 0


def test_text_compares_nfkc_normalised_and_case_folded() -> None:
    log = Log({"id": "w1", "to": "ACME GmbH", "amount": 100, "at": 950.0})
    rule = DuplicateWithin(("to", "amount"), 100, recent=log, clock=lambda: 1_000.0)
    assert rule.evaluate(call(to="\uff21\uff23\uff2d\uff25 GMBH", amount=100)).rank == 2
    assert rule.evaluate(call(to="ACME GMBH", amount=100)).rank == 2
    assert rule.evaluate(call(to="ACNE GMBH", amount=100)).rank == 0


def test_it_fails_closed() -> None:
    def broken(since: float) -> list[dict[str, Any]]:
        raise ConnectionError("ledger unreachable")

    rule = DuplicateWithin(("to", "amount"), 60, recent=broken, tools="payments.wire")
    assert rule.evaluate(call(to="ACME")).reason == (  # type: ignore[union-attr]
        "cannot check for a duplicate call: no amount in the call"
    )
    with AgentKit(store="memory", registry=CompensatorRegistry(), rules=[rule]) as kit:

        @kit.tool(name="payments.wire", semantics="reversible")
        def wire(to: str, amount: int) -> str:
            return "sent"

        with kit.transaction("t"), pytest.raises(GateRefused, match="ledger unreachable"):
            wire("ACME", 5)


def test_other_tools_and_bad_declarations() -> None:
    rule = DuplicateWithin(("to",), 60, recent=Log(), tools="payments.wire")
    other = ToolCall("payments.charge", Semantics.COMPENSABLE, {}, "saga", 1)
    assert rule.evaluate(other).rank == 0
    assert rule.describe() == "no two calls with the same to within 1 minute on payments.wire"
    with pytest.raises(ValueError, match="list of one or more field names"):
        DuplicateWithin("to", 60, recent=Log())
    with pytest.raises(ValueError, match="positive number of seconds"):
        DuplicateWithin(("to",), 0, recent=Log())
    with pytest.raises(TypeError, match="recent must be callable"):
        DuplicateWithin(("to",), 60, recent=[])  # type: ignore[arg-type]
