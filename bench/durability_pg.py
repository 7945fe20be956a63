"""What a durable append to the PostgreSQL log store costs, against floors measured in the same run.

Prints, for 1, 8 and 64 writers (threads of this process):
  * floor: one-row INSERT committed with synchronous_commit = on, one connection per writer
    (the least a durable commit to this server costs);
  * hold-lock: the chain continued under a transaction-scoped advisory lock held across a
    synchronous commit (every writer waits for every other writer's WAL flush; 1 and 8 only);
  * store: PostgresLogStore.append(sync=True), every writer on one store (how a process logs
    its sagas: concurrent appends share round trips and flushes);
  * store per writer: the same with one store per writer (1 and 8 only: a stand-in for writers
    in separate processes, which share only the server);
  * store sync=False: append on one shared store without waiting for the flush;
  * processes (8 writers by default, ``--processes``): one store in each of that many separate
    processes (spawned, connected and waiting before the clock starts), each appending with
    sync=True; also the CPU time per append in those processes.

Cases run in alternating rounds; each line gives the median over the rounds of the p50 latency
of one append and of the throughput, with ratios to the floor's medians.
The server is AGENT_SAGA_TEST_PG_URL, or a throwaway cluster started from local binaries.

Usage: uv run python bench/durability_pg.py [--appends N] [--rounds R] [--url URL]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import threading
import time
from collections.abc import Callable, Collection, Sequence
from contextlib import ExitStack

import psycopg
from agent_saga import Entry
from agent_saga._postgres.store import PostgresLogStore
from agent_saga.testing.postgres import postgres_server, scratch_schema
from psycopg import sql

LINE = b'{"data":{"amount":250,"tool":"payments.charge"},"kind":"step.intent"}' * 3
Step = Callable[[int], None]
Maker = Callable[[int], tuple[Step, Callable[[], None]]]


def run(writers: int, appends: int, make: Maker) -> tuple[float, float]:
    """Run ``appends`` steps split over ``writers`` threads; returns (p50 ms, appends/s)."""
    latencies: list[float] = []
    lock = threading.Lock()
    steps = [make(w) for w in range(writers)]
    barrier = threading.Barrier(writers + 1)

    def work(step: Step) -> None:
        mine = []
        barrier.wait()
        for i in range(max(1, appends // writers)):
            start = time.perf_counter()
            step(i)
            mine.append(time.perf_counter() - start)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=work, args=(step,)) for step, _ in steps]
    for thread in threads:
        thread.start()
    barrier.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    for _, close in steps:
        close()
    return statistics.median(latencies) * 1e3, len(latencies) / elapsed


def raw_maker(url: str, schema: str, mode: str) -> Maker:
    ident = sql.Identifier(schema)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(ident))
        conn.execute(
            sql.SQL("CREATE TABLE {}.r (seq bigint PRIMARY KEY, hash text, line bytea)").format(
                ident
            )
        )
    insert = sql.SQL("INSERT INTO {}.r VALUES (%s, 'h', %s)").format(ident)
    tail = sql.SQL("SELECT coalesce(max(seq), 0) FROM {}.r").format(ident)
    counter = iter(range(1, 10**9))
    counter_lock = threading.Lock()

    def make(_: int) -> tuple[Step, Callable[[], None]]:
        conn = psycopg.connect(url, autocommit=True)

        def floor(_: int) -> None:
            with counter_lock:
                seq = next(counter)
            conn.execute(insert, (seq, LINE))

        def hold_lock(_: int) -> None:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(42)")
                row = conn.execute(tail).fetchone()
                conn.execute(insert, ((row[0] if row else 0) + 1, LINE))

        steps = {"floor": floor, "hold-lock": hold_lock}
        return steps[mode], conn.close

    return make


def store_maker(url: str, schema: str, sync: bool, shared: bool) -> Maker:
    one: list[PostgresLogStore] = []

    def make(writer: int) -> tuple[Step, Callable[[], None]]:
        if shared and one:
            store = one[0]
            close: Callable[[], None] = lambda: None  # noqa: E731
        else:
            store = PostgresLogStore(url, schema=schema)
            one.append(store)
            close = store.close

        def step(i: int) -> None:
            store.append([Entry("step.intent", f"s{writer}", {"i": i}, i)], sync=sync)

        return step, close

    return make


def _process_writer(
    url: str, schema: str, writer: int, n: int, barrier: object, out: object
) -> None:
    """One writer process: open a store, wait for the start, append ``n`` times durably."""
    store = PostgresLogStore(url, schema=schema)
    try:
        mine: list[float] = []
        barrier.wait()  # type: ignore[attr-defined]
        cpu = time.process_time()
        for i in range(n):
            start = time.perf_counter()
            store.append([Entry("step.intent", f"p{writer}", {"i": i}, i)], sync=True)
            mine.append(time.perf_counter() - start)
        out.put((mine, time.process_time() - cpu))  # type: ignore[attr-defined]
    finally:
        store.close()


def run_processes(url: str, schema: str, writers: int, appends: int) -> tuple[float, float, float]:
    """``appends`` durable appends split over ``writers`` processes, one store each; returns
    (p50 ms, appends/s, CPU ms per append in the writers)."""
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(writers + 1), ctx.Queue()
    n = max(1, appends // writers)
    procs = [
        ctx.Process(target=_process_writer, args=(url, schema, w, n, barrier, out))
        for w in range(writers)
    ]
    for proc in procs:
        proc.start()
    barrier.wait(timeout=300)
    began = time.perf_counter()
    results = [out.get(timeout=600) for _ in procs]
    elapsed = time.perf_counter() - began
    for proc in procs:
        proc.join(timeout=60)
    latencies = [lat for mine, _ in results for lat in mine]
    cpu = sum(c for _, c in results)
    return statistics.median(latencies) * 1e3, len(latencies) / elapsed, cpu / len(latencies) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appends", type=int, default=1600, help="appends per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per case")
    parser.add_argument("--writers", default="1,8,64", help="comma-separated writer counts")
    parser.add_argument(
        "--processes", default="8", help="writer counts that also run as separate processes"
    )
    parser.add_argument("--url", default=os.environ.get("AGENT_SAGA_TEST_PG_URL"))
    args = parser.parse_args()
    counts = [int(w) for w in args.writers.split(",")]
    in_processes = {int(w) for w in args.processes.split(",") if w}
    report(args.appends, args.url, args.rounds, counts, in_processes)


def cases(url: str, writers: int) -> list[tuple[str, Callable[[str], Maker]]]:
    out: list[tuple[str, Callable[[str], Maker]]] = [
        ("floor", lambda s: raw_maker(url, s, "floor")),
        ("store", lambda s: store_maker(url, s, True, shared=True)),
        ("store sync=False", lambda s: store_maker(url, s, False, shared=True)),
    ]
    if writers <= 8:
        out.insert(1, ("hold-lock", lambda s: raw_maker(url, s, "hold-lock")))
        out.append(("store per writer", lambda s: store_maker(url, s, True, shared=False)))
    return out


def report(
    appends: int,
    url_given: str | None,
    rounds: int = 3,
    counts: Sequence[int] = (1, 8, 64),
    in_processes: Collection[int] = (8,),
) -> None:
    """Print the figures; starts a throwaway server when no URL is given."""
    with ExitStack() as stack:
        url = url_given or stack.enter_context(postgres_server())
        with psycopg.connect(url) as conn:
            row = conn.execute(
                "SELECT current_setting('server_version'), current_setting('fsync'),"
                " current_setting('wal_sync_method')"
            ).fetchone()
        print(f"PostgreSQL {row[0] if row else '?'}, fsync={row[1] if row else '?'},", end=" ")
        print(f"wal_sync_method={row[2] if row else '?'}; {appends} appends x {rounds} rounds")
        for writers in counts:
            print(f"-- {writers} writer(s): p50 per append, appends/s, vs floor")
            seen: dict[str, list[tuple[float, float]]] = {}
            cpu: list[float] = []
            for _ in range(rounds):
                for name, maker in cases(url, writers):
                    with scratch_schema(url) as schema:
                        seen.setdefault(name, []).append(run(writers, appends, maker(schema)))
                if writers in in_processes:
                    with scratch_schema(url) as schema:
                        p50, rate, per = run_processes(url, schema, writers, appends)
                    seen.setdefault(f"{writers} processes", []).append((p50, rate))
                    cpu.append(per)
            base_p50 = statistics.median(p for p, _ in seen["floor"])
            base_rate = statistics.median(r for _, r in seen["floor"])
            for name, samples in seen.items():
                p50 = statistics.median(p for p, _ in samples)
                rate = statistics.median(r for _, r in samples)
                print(
                    f"  {name:17} {p50:7.3f} ms {rate:7.0f}/s"
                    f"   p50 x{p50 / base_p50:5.2f}  throughput x{rate / base_rate:5.2f}"
                )
            if cpu:
                print(f"  (processes: {statistics.median(cpu):.3f} ms CPU per append, median)")


if __name__ == "__main__":
    main()
