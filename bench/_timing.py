"""Sampling helpers shared by the step and observer benchmarks."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def p50(samples: list[int]) -> float:
    """The median of nanosecond samples, in microseconds."""
    return statistics.median(samples) / 1000.0


def timed(func: Callable[[], object], n: int) -> list[int]:
    """``n`` timings of ``func()``, in nanoseconds."""
    clock = time.perf_counter_ns
    out = []
    for _ in range(n):
        start = clock()
        func()
        out.append(clock() - start)
    return out
