"""What the gate costs per call, against a floor measured in the same run.

Prints p50 figures (microseconds) for:
  * the floor: a bare function call with the same arguments;
  * ``Gate.evaluate`` with 1, 10 and 100 rules (a realistic mix: ranges, caps, allow and deny
    lists, a deny-tools list, require_approval, a rule on a nested path), on a call every rule
    lets through (the worst case: no early refusal);
  * a REVERSIBLE step through the engine with 0 and 10 rules (in-memory log), so the gate's
    share of a step is visible;
  * ``EmbeddingRiskScorer.score`` on the shipped data set (and ``RiskRule`` on a plain function).

Target (issue "policy gate"): Gate.evaluate under 20 us p50 with 10 rules.

Usage: uv run python bench/gate.py [--quick]
"""

from __future__ import annotations

import argparse
import contextvars
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent_saga import (
    COMPENSABLE,
    REVERSIBLE,
    AgentKit,
    AllowValues,
    DenyTools,
    DenyValues,
    EmbeddingRiskScorer,
    Gate,
    MaxValue,
    Range,
    RiskRule,
    Rule,
    ToolCall,
    require_approval,
)

ARGS: dict[str, Any] = {
    "to": {"iban": "DE44500105175407324931"},
    "amount": 420.0,
    "currency": "EUR",
}
CALL = ToolCall("bank.transfer", COMPENSABLE, ARGS, "bench-saga", 1)


def rule_mix(n: int) -> list[Rule]:
    kinds: list[Callable[[int], Rule]] = [
        lambda i: Range("amount", 0, 10_000 + i, tools="bank.transfer", name=f"range{i}"),
        lambda i: MaxValue(50_000 + i, name=f"cap{i}"),
        lambda i: AllowValues("currency", ["EUR", "USD", "GBP"], name=f"currency{i}"),
        lambda i: DenyValues("to.iban", [f"KY{i:020d}"], name=f"sanctions{i}"),
        lambda i: DenyTools(frozenset({f"db.drop{i}"}), name=f"deny{i}"),
        lambda i: require_approval(lambda c: c.arg("amount", 0) > 1e6, name=f"approve{i}"),
    ]
    return [kinds[i % len(kinds)](i) for i in range(n)]


def evaluator(gate: Gate) -> Callable[[], object]:
    return lambda: gate.evaluate(CALL)


def sample(func: Callable[[], object], n: int) -> list[int]:
    clock = time.perf_counter_ns
    out = []
    for _ in range(n):
        start = clock()
        func()
        out.append(clock() - start)
    return out


def rounds(cases: dict[str, Callable[[], object]], per_round: int, count: int) -> dict[str, float]:
    """p50 per case (us), sampled in alternating rounds so drift hits every case alike."""
    samples: dict[str, list[int]] = {name: [] for name in cases}
    for func in cases.values():
        sample(func, 200)  # warm-up
    for _ in range(count):
        for name, func in cases.items():
            samples[name].extend(sample(func, per_round))
    return {name: statistics.median(s) / 1000 for name, s in samples.items()}


def engine_step(rules: list[Rule], home: Path) -> tuple[AgentKit, Callable[[], object]]:
    kit = AgentKit(home=home, store="memory", rules=rules)

    @kit.tool(name="bank.transfer", semantics=REVERSIBLE)
    def transfer(to: dict[str, str], amount: float, currency: str) -> None:
        pass

    context = contextvars.copy_context()  # each kit's saga stays current in its own context
    context.run(kit.transaction("bench").__enter__)

    def step() -> None:
        context.run(transfer, **ARGS)

    return kit, step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    options = parser.parse_args()
    per_round, count = (500, 5) if options.quick else (2000, 10)

    def bare(to: object, amount: object, currency: object) -> None:
        pass

    gates = {n: Gate(rule_mix(n)) for n in (1, 10, 100)}
    cases: dict[str, Callable[[], object]] = {"floor: bare call": lambda: bare(**ARGS)}
    for n, gate in gates.items():
        assert gate.evaluate(CALL).rank == 0
        cases[f"Gate.evaluate, {n} rule(s)"] = evaluator(gate)
    figures = rounds(cases, per_round, count)
    print("gate cost per call (p50, microseconds):")
    for name, value in figures.items():
        print(f"  {name:32s} {value:8.2f}")
    ten = figures["Gate.evaluate, 10 rule(s)"]
    verdict = "meets" if ten < 20 else "misses"
    print(f"  target: < 20 us with 10 rules -> {ten:.2f} us ({verdict} it)")

    with tempfile.TemporaryDirectory() as tmp:
        kit0, step0 = engine_step([], Path(tmp) / "a")
        kit10, step10 = engine_step(rule_mix(10), Path(tmp) / "b")
        steps = rounds({"0 rules": step0, "10 rules": step10}, per_round // 4, count)
        kit0.close()
        kit10.close()
    print("REVERSIBLE step through the engine, memory log (p50, microseconds):")
    for name, value in steps.items():
        print(f"  {name:32s} {value:8.2f}")
    print(f"  the gate's share with 10 rules: {steps['10 rules'] - steps['0 rules']:.2f} us")

    scorer = EmbeddingRiskScorer()
    plain = RiskRule(lambda call: 0.1, name="constant")
    scored = rounds(
        {
            "EmbeddingRiskScorer.score": lambda: scorer.score(CALL),
            "RiskRule (plain fn)": lambda: plain.evaluate(CALL),
        },
        max(50, per_round // 20),
        count,
    )
    print("scorer cost per call (p50, microseconds):")
    for name, value in scored.items():
        print(f"  {name:32s} {value:8.2f}")


if __name__ == "__main__":
    main()
