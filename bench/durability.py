"""The file store's durability costs against floors measured in the same run on the same disk.

Prints:
  * raw append+fsync p50 (200-byte record) and the store's durable append p50 (target <= 1.5x);
  * throughput of durable appends with 1, 8 and 64 concurrent writer threads, against a
    minimal group-commit floor (one flusher: one write and one fsync per batch) measured the
    same way, alternating with it over three rounds (medians; target >= 0.8x at 8 writers);
  * full verification speed in records per second, best of three passes (target >= 200,000
    records/s, small records);
  * the PostgreSQL store's commit latency and throughput against a one-row commit floor (see
    bench/durability_pg.py; skipped with --no-pg or when no server can be started).

Usage: uv run python bench/durability.py [--quick] [--dir PATH] [--no-pg]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from agent_saga import Entry, FileLogStore, verify_file

RECORD = b"x" * 199 + b"\n"
ENTRY = Entry("bench", None, {"payload": "x" * 120}, 0)


def p50_us(samples: list[int]) -> float:
    return statistics.median(samples) / 1000.0


def raw_append_fsync(path: Path, n: int) -> list[int]:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    out = []
    try:
        for _ in range(n):
            start = time.perf_counter_ns()
            os.write(fd, RECORD)
            os.fsync(fd)
            out.append(time.perf_counter_ns() - start)
    finally:
        os.close(fd)
    return out


def store_append(home: Path, n: int) -> list[int]:
    entry = Entry("bench", None, {"payload": "x" * 120}, 0)
    out = []
    with FileLogStore(home) as store:
        for _ in range(n):
            start = time.perf_counter_ns()
            store.append([entry], sync=True)
            out.append(time.perf_counter_ns() - start)
    return out


def durable_append(store: FileLogStore) -> None:
    store.append([ENTRY], sync=True)


def threaded_rate(writers: int, seconds: float, append: Callable[[], None]) -> float:
    """Appends per second with ``writers`` threads calling ``append`` for ``seconds``."""
    stop = threading.Event()
    counts = [0] * writers

    def work(index: int) -> None:
        while not stop.is_set():
            append()
            counts[index] += 1

    threads = [threading.Thread(target=work, args=(i,)) for i in range(writers)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    return sum(counts) / (time.perf_counter() - start)


class GroupCommitFloor:
    """The simplest correct group commit: callers enqueue, one leader writes and fsyncs a batch."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.cond = threading.Condition()
        self.queue: list[bytes] = []
        self.written = 0
        self.durable = 0
        self.flushing = False

    def append(self) -> None:
        with self.cond:
            self.queue.append(RECORD)
            self.written += 1
            mine = self.written
            while self.durable < mine:
                if self.flushing:
                    self.cond.wait()
                    continue
                self.flushing = True
                batch, self.queue, upto = self.queue, [], self.written
                self.cond.release()
                try:
                    os.write(self.fd, b"".join(batch))
                    os.fsync(self.fd)
                finally:
                    self.cond.acquire()
                    self.flushing = False
                    self.durable = upto
                    self.cond.notify_all()

    def close(self) -> None:
        os.close(self.fd)


def verify_rate(home: Path, records: int) -> float:
    with FileLogStore(home) as store:
        batch = [Entry("bench", "s", {"i": i}, 0) for i in range(1000)]
        for _ in range(records // 1000):
            store.append(batch, sync=False)
        store.sync()
    best = 0.0
    for _ in range(3):  # best of three: noise only ever slows a pass down
        start = time.perf_counter()
        report = verify_file(home / "log.jsonl")
        elapsed = time.perf_counter() - start
        assert report.ok, report.error
        best = max(best, report.records / elapsed)
    return best


def ok(passed: bool) -> str:
    return "met" if passed else "MISSED"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples, shorter runs")
    parser.add_argument("--dir", type=Path, default=None, help="directory on the disk to test")
    parser.add_argument("--no-pg", action="store_true", help="skip the PostgreSQL figures")
    args = parser.parse_args()
    n = 300 if args.quick else 2_000
    seconds = 1.0 if args.quick else 3.0
    base = args.dir or Path(tempfile.mkdtemp(prefix="agent-saga-durability-"))
    base.mkdir(parents=True, exist_ok=True)

    raw = p50_us(raw_append_fsync(base / "raw.log", n))
    ours = p50_us(store_append(base / "single", n))
    rows = [
        ("raw append+fsync p50", f"{raw:.1f} us", "floor"),
        ("store durable append p50", f"{ours:.1f} us",
         f"{ours / raw:.2f}x raw, target <= 1.5x: {ok(ours / raw <= 1.5)}"),
    ]  # fmt: skip
    for writers in (1, 8, 64):
        # Floor and store alternate, three rounds each, so a noisy neighbour hits both alike.
        floor_rates, rates = [], []
        for round_ in range(3):
            floor = GroupCommitFloor(base / f"floor{writers}-{round_}.log")
            floor_rates.append(threaded_rate(writers, seconds / 3, floor.append))
            floor.close()
            with FileLogStore(base / f"threads{writers}-{round_}") as store:
                append = functools.partial(durable_append, store)
                rates.append(threaded_rate(writers, seconds / 3, append))
        floor_rate, rate = statistics.median(floor_rates), statistics.median(rates)
        target = f", target >= 0.8x: {ok(rate / floor_rate >= 0.8)}" if writers == 8 else ""
        rows.append(
            (f"{writers} writers, durable appends", f"{rate:,.0f}/s",
             f"floor {floor_rate:,.0f}/s, {rate / floor_rate:.2f}x{target}")
        )  # fmt: skip
    rate = verify_rate(base / "verify", 50_000 if args.quick else 200_000)
    rows.append(
        ("full verification", f"{rate:,.0f} rec/s", f"target >= 200,000: {ok(rate >= 200_000)}")
    )
    print(f"agent-saga file store durability ({'quick' if args.quick else 'full'} run, {base})")
    width = max(len(r[0]) for r in rows)
    for name, value, note in rows:
        print(f"  {name:<{width}}  {value:>14}  {note}")
    if not args.no_pg:
        postgres_figures(200 if args.quick else 800)


def postgres_figures(appends: int) -> None:
    """The PostgreSQL store's figures (bench/durability_pg.py), when a server is available."""
    try:
        import durability_pg  # the sibling script: python puts bench/ on the path
        from agent_saga.testing.postgres import PostgresUnavailable
    except ImportError as exc:
        print(f"PostgreSQL figures skipped: {exc}")
        return
    try:
        durability_pg.report(appends, os.environ.get("AGENT_SAGA_TEST_PG_URL"))
    except PostgresUnavailable as exc:
        print(f"PostgreSQL figures skipped: {exc}")


if __name__ == "__main__":
    main()
