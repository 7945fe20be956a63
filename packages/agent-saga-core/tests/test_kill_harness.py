"""SIGKILL harness: real child processes killed at random points, then recovered.

Children (two at a time, sharing one log) run transactions of three COMPENSABLE steps that fail
three times in four; once they have opened their kit they are killed after a random 0-30 ms, in
forward execution, in a rollback or in a recovery pass of their own. Then two recovery workers
race (each in its own process), and the parent checks. The witnesses live outside the killed
processes:

* a ledger directory where every effect is a file created once per idempotency key;
* acknowledgements the children send over a pipe only after a transaction returned (its
  terminal record is durable by then).

Invariants checked after every round: the log verifies; every acknowledged outcome is in the
log; every saga is settled and none needs a human; every charge of a saga that did not commit is
refunded exactly once, and no charge of a committed saga is refunded; nothing is refunded that
was never charged; the racing recovery workers never recovered the same saga. On PostgreSQL
(owner ttl 0.3 s) a worker whose heartbeat stalls past its ttl may be fenced by the other; it
then stops with its own exit status, and the parent's check recovers what it left.

The same harness runs on the file store (500 kills) and on PostgreSQL. The children are forked
from a fork server that has agent-saga imported (:mod:`kill_children`), not from the pytest
process: each is still a process of its own, killed for real, with nothing of pytest's open.
"""

from __future__ import annotations

import os
import random
import select
import signal
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

from agent_saga import SagaStatus
from kill_children import FENCED, Backend, ForkServer, Ledger, make_kit

FILE_KILLS = 500
PG_KILLS = 60
ROUNDS_PER_LOG = 20


def wait_ready(read_fd: int) -> None:
    """Block until the child has opened its kit (so the kill lands in real work)."""
    ready, _, _ = select.select([read_fd], [], [], 30)
    assert ready, "a child did not start within 30 s"
    assert os.read(read_fd, 8) == b"ready -\n"


def collect(
    server: ForkServer, pid: int, read_fd: int, *, kill: bool, fenced_ok: bool = False
) -> list[tuple[str, str]]:
    if kill:
        os.kill(pid, signal.SIGKILL)
    code = server.wait(pid)
    chunks = []
    while chunk := os.read(read_fd, 65536):
        chunks.append(chunk)
    os.close(read_fd)
    if not kill:
        assert code == 0 or (fenced_ok and code == FENCED), "a recovery worker failed"
    lines = b"".join(chunks).decode().splitlines()
    return [(p[0], p[1]) for p in (line.split() for line in lines) if len(p) == 2]


def race_recovery(server: ForkServer, backend: Backend, home: Path, ledger: Ledger) -> None:
    """Two recovery workers at once: every saga is recovered by at most one of them."""
    time.sleep(backend.owner_ttl + 0.2 if backend.owner_ttl else 0)
    workers = [server.fork(backend, home, ledger, 0, recovery_only=True) for _ in range(2)]
    for _, read_fd in workers:
        wait_ready(read_fd)
    first, second = (
        {s for s, _ in collect(server, pid, fd, kill=False, fenced_ok=True)} for pid, fd in workers
    )
    assert not first & second, f"recovered twice: {first & second}"


def check(backend: Backend, home: Path, ledger: Ledger, acked: dict[str, str]) -> None:
    kit = make_kit(backend, home, ledger)
    try:
        report = kit.recover(lease_ttl=backend.lease_ttl)
        assert report.needs_human == (), report.needs_human
        verified = kit.verify()
        assert verified.ok, verified.error
        records = list(kit.store.records())
    finally:
        kit.close()
    ends = {r.saga: r.data["status"] for r in records if r.kind == "saga.end" and r.saga}
    begun = {r.saga for r in records if r.kind == "saga.begin"}
    for saga_id, status in acked.items():
        assert ends.get(saga_id) == status, f"acknowledged {saga_id} {status} lost"
    assert begun <= set(ends), f"unsettled sagas: {begun - set(ends)}; {report}"
    charges, refunds = ledger.keys("charge"), ledger.keys("refund")
    assert refunds <= charges, f"refunded but never charged: {refunds - charges}"
    committed = {
        r.data["idempotency_key"]
        for r in records
        if r.kind == "step.intent" and ends.get(r.saga or "") == SagaStatus.COMMITTED.value
    }
    assert not refunds & committed, "a committed saga's charge was refunded"
    left = charges - committed - refunds
    assert not left, f"charges left unrefunded: {sorted(left)[:3]}"


def run_harness(backend: Backend, tmp_path: Path, kills_wanted: int, homes: Iterator[Path]) -> int:
    with ForkServer(tmp_path / "fork-server", postgres=backend.url is not None) as server:
        return run_rounds(server, backend, tmp_path, kills_wanted, homes)


def run_rounds(
    server: ForkServer, backend: Backend, tmp_path: Path, kills_wanted: int, homes: Iterator[Path]
) -> int:
    rng = random.Random(20261130)
    kills, rounds = 0, 0
    home = ledger_dir = tmp_path
    acked: dict[str, str] = {}
    while kills < kills_wanted:
        if rounds % ROUNDS_PER_LOG == 0:
            home = next(homes)
            ledger_dir = tmp_path / f"ledger-{home.name}"
            ledger_dir.mkdir()
            acked = {}
        ledger = Ledger(ledger_dir)
        children = [
            server.fork(backend, home, ledger, rng.randrange(2**32), recovery_only=False)
            for _ in range(2)
        ]
        for _, read_fd in children:
            wait_ready(read_fd)
        time.sleep(rng.uniform(0, 0.03))
        for pid, read_fd in children:
            acked.update(dict(collect(server, pid, read_fd, kill=True)))
            kills += 1
        if rng.random() < 0.3:  # kill a recovery pass mid-way
            time.sleep(backend.owner_ttl + 0.1 if backend.url else 0)
            pid, read_fd = server.fork(backend, home, ledger, 0, recovery_only=True)
            wait_ready(read_fd)
            time.sleep(rng.uniform(0, 0.01))
            collect(server, pid, read_fd, kill=True)
            kills += 1
            if backend.url:  # its claims lapse by time on PostgreSQL
                time.sleep(backend.lease_ttl)
        race_recovery(server, backend, home, ledger)
        check(backend, home, ledger, acked)
        rounds += 1
    return kills


def test_sigkill_harness_file_store(tmp_path: Path) -> None:
    homes = (tmp_path / f"home{n}" for n in range(10_000))
    assert run_harness(Backend(), tmp_path, FILE_KILLS, homes) >= FILE_KILLS


def test_sigkill_harness_postgres(tmp_path: Path, pg_url: str) -> None:
    from agent_saga.testing.postgres import scratch_schema

    with ExitStack() as stack:

        def homes() -> Iterator[Path]:
            while True:
                yield tmp_path / stack.enter_context(scratch_schema(pg_url))

        assert run_harness(Backend(pg_url), tmp_path, PG_KILLS, homes()) >= PG_KILLS
