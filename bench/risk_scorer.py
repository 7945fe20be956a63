"""Precision and recall of EmbeddingRiskScorer on the held-out half of the shipped data set.

The shipped set (``agent_saga/data/risk_calls.jsonl``) holds labelled tool calls written for
this project. The scorer is built from one half (every second call of each label) and scored on
the other half at the default threshold; then the same the other way round, and the cost of
one score.

Targets (issue "policy gate"): recall >= 0.9 with precision >= 0.8 on the held-out half.

Usage: uv run python bench/risk_scorer.py [--threshold 0.5]
"""

from __future__ import annotations

import argparse
import statistics
import time

from agent_saga import COMPENSABLE, ToolCall
from agent_saga._gate.risk import (
    DEFAULT_THRESHOLD,
    EmbeddingRiskScorer,
    LabelledCall,
    shipped_calls,
    split_halves,
)


def measure(train: list[LabelledCall], test: list[LabelledCall], threshold: float) -> None:
    scorer = EmbeddingRiskScorer(train, approve_at=threshold)
    tp = fp = fn = tn = 0
    for call in test:
        flagged = scorer.score_args(call.tool, call.args) >= threshold
        if flagged and call.dangerous:
            tp += 1
        elif flagged:
            fp += 1
            print(f"  false alarm: {call.tool} {dict(call.args)}")
        elif call.dangerous:
            fn += 1
            print(f"  missed:      {call.tool} {dict(call.args)}")
        else:
            tn += 1
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    print(
        f"  {len(train)} train / {len(test)} held out: precision {precision:.2f}, "
        f"recall {recall:.2f} (tp {tp}, fp {fp}, fn {fn}, tn {tn})"
    )


def cost(scorer: EmbeddingRiskScorer, calls: list[LabelledCall], rounds: int) -> float:
    samples = []
    tool_calls = [ToolCall(c.tool, COMPENSABLE, c.args, "bench", 1) for c in calls]
    for _ in range(rounds):
        for call in tool_calls:
            start = time.perf_counter_ns()
            scorer.score(call)
            samples.append(time.perf_counter_ns() - start)
    return statistics.median(samples) / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD)
    options = parser.parse_args()
    calls = shipped_calls()
    dangerous = sum(c.dangerous for c in calls)
    print(f"data set: {len(calls)} calls ({dangerous} dangerous, {len(calls) - dangerous} benign)")
    first, second = split_halves(calls)
    print(f"held-out half, threshold {options.threshold:g}:")
    measure(first, second, options.threshold)
    print("the halves swapped:")
    measure(second, first, options.threshold)
    full = EmbeddingRiskScorer(calls)
    print(f"score cost p50: {cost(full, calls, 20):.1f} us per call ({len(calls)} examples)")


if __name__ == "__main__":
    main()
