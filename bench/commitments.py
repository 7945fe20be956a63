"""What the salted commitments (record version 2) cost to seal and to check, against floors
measured in the same run.

Prints best-of and median CPU times (microseconds, ``time.thread_time``: a busy neighbour's
share of the CPU is not counted) over alternating rounds for:
  * sealing a REVERSIBLE step's two records (``step.intent``, ``step.done``) with their
    commitments, against the same records hashed as stored (committed keys renamed);
  * the floor of the commitments themselves: per committed value, a salt and one BLAKE2s-256
    of it with the value's bytes, in hex (the step's records commit two values);
  * checking those lines as ``verify`` does (:func:`check_line_fast`) and reading them
    (:func:`parse_line`, which decodes them), committed and hashed as stored;
and the rate at which ``verify_file`` checks a 100,000-record log of such steps, per second of
CPU time, against the same log with nothing committed.

Usage: uv run python bench/commitments.py [--quick]
"""

from __future__ import annotations

import argparse
import base64
import os
import statistics
import tempfile
import time
import timeit
from binascii import hexlify
from collections.abc import Callable
from hashlib import blake2s
from pathlib import Path

from agent_saga import verify_file
from agent_saga._log.chain import Chain, check_line_fast, parse_line
from agent_saga._log.commit import COMMITTED
from agent_saga._log.records import GENESIS, Entry
from step_overhead import STEP_RECORDS

PLAIN = tuple(
    Entry(e.kind, e.saga, {(k[:-1] + "_" if k in COMMITTED else k): v for k, v in e.data.items()},
          e.ts)
    for e in STEP_RECORDS
)  # fmt: skip
"""The step's records with their committed keys renamed (same sizes): hashed as stored."""


def fresh_salt() -> bytes:
    return base64.urlsafe_b64encode(os.urandom(18))[:22]


def cpu_us(func: Callable[[], object], number: int) -> float:
    return min(timeit.repeat(func, number=number, repeat=3, timer=time.thread_time)) / number * 1e6


def write_log(path: Path, records: int, entries: tuple[Entry, ...]) -> None:
    chain, prev, lines, seq = Chain(), GENESIS, [], 0
    while seq < records:
        for entry in entries:
            seq += 1
            record, line = chain.seal(entry, seq, prev)
            prev = record.hash
            lines.append(line)
    path.write_bytes(b"".join(lines))


def verify_rate(path: Path) -> float:
    """Records checked per second of this thread's CPU time (its I/O system calls included)."""
    start = time.thread_time()
    report = verify_file(path)
    elapsed = time.thread_time() - start
    assert report.ok, report.error
    return report.records / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples, a smaller log")
    args = parser.parse_args()
    number, rounds = (500, 3) if args.quick else (2000, 5)
    records = 20_000 if args.quick else 100_000

    chain, prev = Chain(), GENESIS.encode()
    committed = [chain.seal(e, 2, GENESIS)[1][:-1] for e in STEP_RECORDS]
    plain = [chain.seal(e, 2, GENESIS)[1][:-1] for e in PLAIN]
    salts = [fresh_salt() for _ in range(number * 8)]
    value = b"1"

    def leaf_floor() -> None:
        for _ in range(2):  # two committed values per step
            hexlify(blake2s(salts.pop() + value).digest())

    pieces: dict[str, Callable[[], object]] = {
        "seal step, committed": lambda: [chain.seal(e, 2, GENESIS) for e in STEP_RECORDS],
        "seal step, hashed as stored": lambda: [chain.seal(e, 2, GENESIS) for e in PLAIN],
        "floor: 2 salts + 2 BLAKE2s": leaf_floor,
        "check step lines, committed": lambda: [check_line_fast(chain, x, 2, prev)
                                                for x in committed],
        "check step lines, as stored": lambda: [check_line_fast(chain, x, 2, prev) for x in plain],
        "read step lines, committed": lambda: [parse_line(chain, x, 2, GENESIS) for x in committed],
        "read step lines, as stored": lambda: [parse_line(chain, x, 2, GENESIS) for x in plain],
    }  # fmt: skip
    samples: dict[str, list[float]] = {name: [] for name in pieces}
    base = Path(tempfile.mkdtemp(prefix="agent-saga-bench-"))
    logs = {"committed": base / "committed.jsonl", "as stored": base / "plain.jsonl"}
    write_log(logs["committed"], records, STEP_RECORDS)
    write_log(logs["as stored"], records, PLAIN)
    rates: dict[str, list[float]] = {name: [] for name in logs}
    for _ in range(rounds):  # alternating, so a noisy neighbour slows every figure alike
        for name, func in pieces.items():
            salts.extend(fresh_salt() for _ in range(number * 8))
            samples[name].append(cpu_us(func, number))
        for name, path in logs.items():
            rates[name].append(verify_rate(path))
    for path in logs.values():
        path.unlink()
    base.rmdir()

    print(f"agent-saga commitments, CPU us per call, best / median of {rounds} rounds")
    for name, values in samples.items():
        print(f"  {name:<30} {min(values):7.2f} / {statistics.median(values):7.2f}")
    seal_extra = min(samples["seal step, committed"]) - min(samples["seal step, hashed as stored"])
    print(f"  commitments add to sealing a step: {seal_extra:.2f} us (best); target <= 2 us")
    print(f"verify_file, {records:,} records, records per CPU second (best / median)")
    for name, values in rates.items():
        print(f"  {name:<30} {max(values):10,.0f} / {statistics.median(values):10,.0f}")


if __name__ == "__main__":
    main()
