"""What observing a saga costs per step, against floors measured in the same run.

Prints p50 figures (microseconds) for a REVERSIBLE step (in-memory log, fast path) run:
  * the floor: a bare function call;
  * with no observer (the engine's own cost: one ``is None`` check per event site);
  * with a do-nothing :class:`agent_saga.Observer` (the cost of the dispatch itself);
  * with :class:`agent_saga_otel.OTelObserver` on an SDK tracer provider with the saga-id
    processor and the in-memory exporter (a span per step, made current, the trace context
    stamped on the step's records);
  * the span floor: one bare span started and ended on that same provider, which any tracing of
    a step pays whatever the library (its share of the observer's cost is the SDK's).

Target (issue "observability"): the OTel observer adds under 30 us p50 per step.

Usage: uv run python bench/observer.py [--quick]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable

from _timing import p50, timed
from agent_saga import REVERSIBLE, AgentKit, Observer
from agent_saga_otel import OTelObserver, SagaIdSpanProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

STEPS_PER_SAGA = 50


def step_samples(observers: Iterable[Observer], n: int, after: Callable[[], None]) -> list[int]:
    """Per-step timings of a REVERSIBLE tool, ``STEPS_PER_SAGA`` steps per transaction."""
    kit = AgentKit(store="memory", observers=observers, checkpoints=False)

    @kit.tool(name="bench.read", semantics=REVERSIBLE)
    def read(x: int) -> int:
        return x

    samples: list[int] = []
    try:
        for _ in range(max(1, n // STEPS_PER_SAGA)):
            with kit.transaction("bench-observer"):
                samples.extend(timed(lambda: read(1), STEPS_PER_SAGA))
            after()
    finally:
        kit.close()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    args = parser.parse_args()
    n = 2_000 if args.quick else 20_000

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SagaIdSpanProcessor())
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    def bare(x: int) -> int:
        return x

    def nothing() -> None:
        return None

    tracer = provider.get_tracer("bench")

    def bare_span() -> None:
        tracer.start_span("bench").end()

    span_floor: list[int] = []
    floor: list[int] = []
    plain: list[int] = []
    noop: list[int] = []
    otel: list[int] = []
    rounds = 5
    # Alternating rounds, pooled: a noisy neighbour slows every figure alike.
    for _ in range(rounds):
        floor.extend(timed(lambda: bare(1), n // rounds))
        plain.extend(step_samples([], n // rounds, nothing))
        noop.extend(step_samples([Observer()], n // rounds, nothing))
        otel.extend(step_samples([OTelObserver(provider)], n // rounds, exporter.clear))
        span_floor.extend(timed(bare_span, n // rounds))
        exporter.clear()
    provider.shutdown()

    floor_p50, plain_p50, noop_p50, otel_p50 = p50(floor), p50(plain), p50(noop), p50(otel)
    added = otel_p50 - plain_p50
    span_p50 = p50(span_floor)
    rows = [
        ("bare function call (floor)", f"{floor_p50:.2f} us", ""),
        ("step, no observer", f"{plain_p50:.2f} us", f"+{plain_p50 - floor_p50:.2f} us on floor"),
        (
            "step, do-nothing Observer",
            f"{noop_p50:.2f} us",
            f"+{noop_p50 - plain_p50:.2f} us on no observer",
        ),
        (
            "step, OTelObserver + in-memory exporter",
            f"{otel_p50:.2f} us",
            f"+{added:.2f} us on no observer; target < 30 us: {'met' if added < 30 else 'MISSED'}",
        ),
        (
            "bare SDK span start+end (span floor)",
            f"{span_p50:.2f} us",
            f"observer beyond one span: {added - span_p50:.2f} us",
        ),
    ]
    print(
        f"agent-saga observer cost per REVERSIBLE step, p50 ({'quick' if args.quick else 'full'})"
    )
    width = max(len(r[0]) for r in rows)
    for name, value, note in rows:
        print(f"  {name:<{width}}  {value:>10}  {note}")


if __name__ == "__main__":
    main()
