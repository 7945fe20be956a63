"""What a step costs, against floors measured in the same run on the same disk.

Prints p50 figures (microseconds) for:
  * a bare function call;
  * a REVERSIBLE step's added cost (file store, fast path), and the process CPU time per step
    over those rounds (every thread: the saga index's work behind the writer included);
  * what the salted commitments (record version 2, which let a value be masked later) add to
    sealing that step's two records, against sealing the same records hashed as stored;
  * a COMPENSABLE step and a one-step COMPENSABLE transaction on the file store;
  * the raw append+fsync floor (200-byte record, same directory);
  * the user and system CPU time of the measuring thread per one-step transaction and per
    floor append;
  * ``import agent_saga`` (fresh interpreter, minus interpreter start-up), and which heavy
    modules it loaded.

Targets (issue "spine"): REVERSIBLE overhead <= 10 us p50; one-step COMPENSABLE transaction
<= 2.5x the raw append+fsync floor p50; import under 80 ms with no CLI library or framework.
Issue 15: the commitments add at most 2 us to a REVERSIBLE step.

Usage: uv run python bench/step_overhead.py [--quick] [--dir PATH]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _timing import p50, timed
from agent_saga import REVERSIBLE, AgentKit, FileLogStore
from agent_saga._log.chain import Chain
from agent_saga._log.commit import COMMITTED
from agent_saga._log.records import GENESIS, Entry

Timer = Callable[[], int]


def raw_fsync_floor(directory: Path, n: int) -> list[int]:
    path = directory / "raw-floor.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    record = b"x" * 199 + b"\n"

    def append() -> None:
        os.write(fd, record)
        os.fsync(fd)

    try:
        timed(append, 10)
        return timed(append, n)
    finally:
        os.close(fd)
        path.unlink()


STEP_RECORDS = (
    Entry(
        "step.intent",
        "0194f5e6-7a8b-7c9d-8e0f-123456789abc",
        {
            "ordinal": 1,
            "tool": "bench.read",
            "semantics": "reversible",
            "args": {"x": 1},
            "compensation": None,
            "idempotency_key": "as1-4fb3ee5a146c75dca29554d78f047bde",
        },
        1_764_000_000_000,
    ),
    Entry(
        "step.done",
        "0194f5e6-7a8b-7c9d-8e0f-123456789abc",
        {"ordinal": 1, "tool": "bench.read", "result": 1, "result_restorable": True},
        1_764_000_000_001,
    ),
)
"""A REVERSIBLE step's two records, as the engine writes them for ``read(1)``."""


def _uncommitted(entry: Entry) -> Entry:
    """``entry`` with its committed keys renamed (same sizes): sealed, it is hashed as stored."""
    renamed = {(k[:-1] + "_" if k in COMMITTED else k): v for k, v in entry.data.items()}
    return Entry(entry.kind, entry.saga, renamed, entry.ts)


def commitment_costs(n: int) -> tuple[list[int], list[int]]:
    """Sealing :data:`STEP_RECORDS` as the store does (salted commitments), and the same
    records with nothing committed (hashed as stored, as every record was before version 2)."""
    chain = Chain()
    plain = tuple(_uncommitted(entry) for entry in STEP_RECORDS)

    def committed() -> None:
        for entry in STEP_RECORDS:
            chain.seal(entry, 2, GENESIS)

    def as_stored() -> None:
        for entry in plain:
            chain.seal(entry, 2, GENESIS)

    timed(committed, 200)
    timed(as_stored, 200)
    return timed(committed, n), timed(as_stored, n)


def import_cost(runs: int) -> tuple[float, list[str]]:
    probe = (
        "import sys, time; t = time.perf_counter(); import agent_saga; "
        "d = time.perf_counter() - t; "
        "heavy = [m for m in ('click', 'rich', 'langchain_core', 'llama_index', 'agents', "
        "'opentelemetry', 'slack_bolt', 'cryptography') if m in sys.modules]; "
        "print(d * 1000, ','.join(heavy))"
    )
    # Measured as users see it: with the bytecode cache written (a first run warms it).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-c", "import agent_saga"], env=env, check=True)
    costs, heavy = [], ""
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env
        ).stdout.split()
        costs.append(float(out[0]))
        heavy = out[1] if len(out) > 1 else ""
    return statistics.median(costs), [m for m in heavy.split(",") if m]


class CpuMeter:
    """User and system CPU time of the calling thread over the measured calls (the saga
    index's thread, which works while the writer is quiet, during the floor's rounds, is left
    out: the REVERSIBLE row's process figure counts it)."""

    def __init__(self) -> None:
        self.user = self.system = 0.0

    def run(self, measure: Callable[[], list[int]]) -> list[int]:
        before = resource.getrusage(resource.RUSAGE_THREAD)
        samples = measure()
        after = resource.getrusage(resource.RUSAGE_THREAD)
        self.user += after.ru_utime - before.ru_utime
        self.system += after.ru_stime - before.ru_stime
        return samples

    def per_call(self, calls: int) -> str:
        return f"{self.user / calls * 1e6:.1f} + {self.system / calls * 1e6:.1f} us"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    parser.add_argument("--dir", type=Path, default=None, help="directory on the disk to test")
    parser.add_argument(
        "--solo", action="store_true", help="open the home's store in solo mode (FileLogStore)"
    )
    args = parser.parse_args()
    n_fast = 2_000 if args.quick else 20_000
    n_sync = 200 if args.quick else 1_000

    base = args.dir or Path(tempfile.mkdtemp(prefix="agent-saga-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    home = base / "home"
    kit = (
        AgentKit(home=home, store=FileLogStore(home, solo=True))
        if args.solo
        else AgentKit(home=home)
    )

    def bare(x: int) -> int:
        return x

    @kit.tool(name="bench.read", semantics=REVERSIBLE)
    def read(x: int) -> int:
        return x

    @kit.compensator("bench.undo")
    def undo(result: int) -> None:
        return None

    @kit.tool(name="bench.charge", compensate="bench.undo")
    def charge(x: int) -> int:
        return x

    def one_step() -> None:
        with kit.transaction("bench-one-step"):
            charge(1)

    # Each figure and its floor are sampled in alternating rounds and pooled, so a noisy
    # neighbour slows both alike.
    bare_s: list[int] = []
    reversible: list[int] = []
    compensable: list[int] = []
    transaction: list[int] = []
    floor: list[int] = []
    sealed: list[int] = []
    plain: list[int] = []
    reversible_cpu_ns, transaction_cpu, floor_cpu = 0, CpuMeter(), CpuMeter()
    rounds = 5
    for _ in range(rounds):
        bare_s.extend(timed(lambda: bare(1), n_fast // rounds))
        with_commitments, hashed_as_stored = commitment_costs(n_fast // rounds)
        sealed.extend(with_commitments)
        plain.extend(hashed_as_stored)
        cpu_start = time.process_time_ns()
        for _ in range(n_fast // rounds // 100):
            with kit.transaction("bench-reversible"):
                reversible.extend(timed(lambda: read(1), 100))
        reversible_cpu_ns += time.process_time_ns() - cpu_start
        floor.extend(floor_cpu.run(lambda: raw_fsync_floor(base, n_sync // rounds)))
        for _ in range(n_sync // rounds // 10):
            with kit.transaction("bench-compensable"):
                compensable.extend(timed(lambda: charge(1), 10))
        transaction.extend(transaction_cpu.run(lambda: timed(one_step, n_sync // rounds)))
    bare_p50, reversible_p50 = p50(bare_s), p50(reversible)
    compensable_p50, transaction_p50, floor_p50 = p50(compensable), p50(transaction), p50(floor)
    kit.close()
    import_ms, heavy = import_cost(5 if args.quick else 11)

    added = reversible_p50 - bare_p50
    commitments = p50(sealed) - p50(plain)
    ratio = transaction_p50 / floor_p50
    rows = [
        ("bare function call", f"{bare_p50:.2f} us", ""),
        ("REVERSIBLE step, added", f"{added:.2f} us", f"target <= 10 us: {ok(added <= 10)}"),
        (
            "  process CPU per step",
            f"{reversible_cpu_ns / len(reversible) / 1000:.2f} us",
            "all threads, transactions and timing included",
        ),
        (
            "  of which salted commitments",
            f"{commitments:.2f} us",
            f"sealing its 2 records: {p50(sealed):.2f} us vs {p50(plain):.2f} us hashed as "
            f"stored; target <= 2 us: {ok(commitments <= 2)}",
        ),
        (
            "COMPENSABLE step (file store)",
            f"{compensable_p50:.1f} us",
            f"{compensable_p50 / floor_p50:.2f}x floor",
        ),
        (
            "one-step COMPENSABLE transaction",
            f"{transaction_p50:.1f} us",
            f"{ratio:.2f}x floor, target <= 2.5x: {ok(ratio <= 2.5)}",
        ),
        (
            "  thread CPU, user + system",
            transaction_cpu.per_call(len(transaction)),
            "per transaction, its thread (the syncs' kernel work is in the system part)",
        ),
        ("raw append+fsync floor (200 B)", f"{floor_p50:.1f} us", "same disk, same run"),
        ("  thread CPU, user + system", floor_cpu.per_call(len(floor)), "per floor append"),
        (
            "import agent_saga",
            f"{import_ms:.1f} ms",
            f"target < 80 ms: {ok(import_ms < 80)}; heavy modules: {', '.join(heavy) or 'none'}",
        ),
    ]
    print(f"agent-saga step overhead, p50 ({'quick' if args.quick else 'full'} run, {base})")
    width = max(len(r[0]) for r in rows)
    for name, value, note in rows:
        print(f"  {name:<{width}}  {value:>10}  {note}")


def ok(passed: bool) -> str:
    return "met" if passed else "MISSED"


if __name__ == "__main__":
    main()
