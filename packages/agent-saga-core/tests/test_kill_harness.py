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

The same harness runs on the file store (500 kills) and on PostgreSQL.
"""

from __future__ import annotations

import contextlib
import os
import random
import select
import signal
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

from agent_saga import (
    AgentKit,
    CompensatorRegistry,
    FileLogStore,
    LogStore,
    SagaRolledBack,
    SagaStatus,
)

FILE_KILLS = 500
PG_KILLS = 60
FENCED = 3
"""A recovery worker's exit status when another worker declared it dead and fenced it."""
ROUNDS_PER_LOG = 20
PG_OWNER_TTL = 0.3
PG_LEASE_TTL = 1.0


class Ledger:
    """Effects as files: ``<action>@<key>``, created once whatever the number of calls."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def effect(self, action: str, key: str) -> None:
        with contextlib.suppress(FileExistsError):
            os.close(os.open(self.root / f"{action}@{key}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))

    def keys(self, action: str) -> set[str]:
        prefix = f"{action}@"
        return {p.name[len(prefix) :] for p in self.root.iterdir() if p.name.startswith(prefix)}


class Backend:
    """Where the log lives: the file store in ``home``, or a PostgreSQL schema per ``home``."""

    def __init__(self, url: str | None = None) -> None:
        self.url = url
        self.owner_ttl = PG_OWNER_TTL if url else 0.0
        self.lease_ttl = PG_LEASE_TTL if url else 60.0
        """A killed recovery worker's claim lapses after this on PostgreSQL (at once on files)."""

    def store(self, home: Path) -> LogStore:
        if self.url is None:
            return FileLogStore(home)
        from agent_saga._postgres.store import PostgresLogStore

        return PostgresLogStore(self.url, schema=home.name, owner_ttl=self.owner_ttl)


def make_kit(backend: Backend, home: Path, ledger: Ledger) -> AgentKit:
    kit = AgentKit(home=home, store=backend.store(home), registry=CompensatorRegistry())

    @kit.compensator("kh.refund")
    def refund(idempotency_key: str) -> None:
        ledger.effect("refund", idempotency_key.removesuffix("/compensate"))

    def charged(idempotency_key: str, amount: int) -> bool:
        return idempotency_key in ledger.keys("charge")

    @kit.tool(name="kh.charge", compensate="kh.refund", probe=charged)
    def charge(amount: int, idempotency_key: str) -> dict[str, str]:
        ledger.effect("charge", idempotency_key)
        return {"charge": idempotency_key}

    kit.charge = charge  # type: ignore[attr-defined]
    return kit


def agent(kit: AgentKit, ack_fd: int, seed: int, lease_ttl: float) -> None:
    """A child's whole life: transactions until it is killed."""
    rng = random.Random(seed)
    if rng.random() < 0.2:
        kit.recover(lease_ttl=lease_ttl)  # a child may die during recovery too
    for n in range(10_000):
        fail_at = rng.choice([None, 1, 2, 3])
        try:
            with kit.transaction(f"t{n}") as saga:
                for step in (1, 2, 3):
                    kit.charge(step)  # type: ignore[attr-defined]
                    if step == fail_at:
                        raise RuntimeError("agent gave up")
            os.write(ack_fd, f"{saga.id} committed\n".encode())
        except SagaRolledBack as exc:
            # A rollback whose log writes failed (on PostgreSQL: this child's ownership expired
            # under load and another process fenced it) reports needs_human with the log errors:
            # its outcome is not durable, so it is no acknowledgement. The checks below still
            # require the saga settled by whoever took it over.
            if not exc.report.log_errors:
                os.write(ack_fd, f"{exc.saga_id} {exc.report.status.value}\n".encode())


def spawn(
    backend: Backend, home: Path, ledger: Ledger, seed: int, *, recovery_only: bool = False
) -> tuple[int, int]:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child never returns into pytest
        code = 0
        kit = None
        try:
            os.close(read_fd)
            kit = make_kit(backend, home, ledger)
            os.write(write_fd, b"ready -\n")
            if recovery_only:
                for saga in kit.recover(lease_ttl=backend.lease_ttl).recovered:
                    os.write(write_fd, f"{saga.saga_id} recovered\n".encode())
            else:
                agent(kit, write_fd, seed, backend.lease_ttl)
        except BaseException as exc:
            # A recovery worker whose heartbeat stalled past its ttl is fenced by the other
            # one (its owner row deleted): stopping is then its correct behaviour.
            code = FENCED if recovery_only and _fenced(kit) else 1
            os.write(2, f"harness child failed: {exc!r}\n".encode())
        finally:
            os._exit(code)
    os.close(write_fd)
    return pid, read_fd


def wait_ready(read_fd: int) -> None:
    """Block until the child has opened its kit (so the kill lands in real work)."""
    ready, _, _ = select.select([read_fd], [], [], 30)
    assert ready, "a child did not start within 30 s"
    assert os.read(read_fd, 8) == b"ready -\n"


def _fenced(kit: AgentKit | None) -> bool:
    return kit is not None and not kit.store.owner_alive(kit.store.owner_id)


def collect(
    pid: int, read_fd: int, *, kill: bool, fenced_ok: bool = False
) -> list[tuple[str, str]]:
    if kill:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    chunks = []
    while chunk := os.read(read_fd, 65536):
        chunks.append(chunk)
    os.close(read_fd)
    if not kill:
        code = os.waitstatus_to_exitcode(status)
        assert code == 0 or (fenced_ok and code == FENCED), "a recovery worker failed"
    lines = b"".join(chunks).decode().splitlines()
    return [(p[0], p[1]) for p in (line.split() for line in lines) if len(p) == 2]


def race_recovery(backend: Backend, home: Path, ledger: Ledger) -> None:
    """Two recovery workers at once: every saga is recovered by at most one of them."""
    time.sleep(backend.owner_ttl + 0.2 if backend.owner_ttl else 0)
    workers = [spawn(backend, home, ledger, 0, recovery_only=True) for _ in range(2)]
    for _, read_fd in workers:
        wait_ready(read_fd)
    first, second = (
        {s for s, _ in collect(pid, fd, kill=False, fenced_ok=True)} for pid, fd in workers
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
        children = [spawn(backend, home, ledger, rng.randrange(2**32)) for _ in range(2)]
        for _, read_fd in children:
            wait_ready(read_fd)
        time.sleep(rng.uniform(0, 0.03))
        for pid, read_fd in children:
            acked.update(dict(collect(pid, read_fd, kill=True)))
            kills += 1
        if rng.random() < 0.3:  # kill a recovery pass mid-way
            time.sleep(backend.owner_ttl + 0.1 if backend.url else 0)
            pid, read_fd = spawn(backend, home, ledger, 0, recovery_only=True)
            wait_ready(read_fd)
            time.sleep(rng.uniform(0, 0.01))
            collect(pid, read_fd, kill=True)
            kills += 1
            if backend.url:  # its claims lapse by time on PostgreSQL
                time.sleep(backend.lease_ttl)
        race_recovery(backend, home, ledger)
        check(backend, home, ledger, acked)
        rounds += 1
    return kills


def test_sigkill_harness_file_store(tmp_path: Path) -> None:
    homes = (tmp_path / f"home{n}" for n in range(10_000))
    assert run_harness(Backend(), tmp_path, FILE_KILLS, homes) >= FILE_KILLS


def test_sigkill_harness_postgres(tmp_path: Path) -> None:
    from agent_saga.testing.postgres import scratch_schema, server_for_tests

    with ExitStack() as stack:
        url = stack.enter_context(server_for_tests())

        def homes() -> Iterator[Path]:
            while True:
                yield tmp_path / stack.enter_context(scratch_schema(url))

        assert run_harness(Backend(url), tmp_path, PG_KILLS, homes()) >= PG_KILLS
