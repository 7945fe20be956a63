"""SIGKILL harness: real child processes killed at random points, then recovered.

Children (two at a time, sharing one home) run transactions of three COMPENSABLE steps that
fail half of the time; they are killed after a random 0-30 ms, in forward execution, in a
rollback or in a recovery pass of their own. Then recovery runs (in a child that may itself be
killed, then to completion in the parent). The witnesses live outside the killed processes:

* a ledger directory where every effect is a file created once per idempotency key, plus a
  journal line per call;
* acknowledgements the children send over a pipe only after a transaction returned (its
  terminal record is durable by then).

Invariants checked after every round: the log verifies; every acknowledged outcome is in the
log; every saga is settled; every charge of a saga that did not commit is refunded exactly once,
and no charge of a committed saga is refunded; nothing is refunded that was never charged.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from collections.abc import Iterator
from pathlib import Path

from agent_saga import (
    AgentKit,
    CompensatorRegistry,
    FileLogStore,
    Record,
    SagaRolledBack,
    SagaStatus,
)

KILLS = 500
ROUNDS_PER_HOME = 20


class Ledger:
    """Effects as files: ``<action>@<key>`` created once; every call appends to ``journal``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def effect(self, action: str, key: str) -> None:
        with contextlib.suppress(FileExistsError):
            os.close(os.open(self.root / f"{action}@{key}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        fd = os.open(self.root / "journal", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            os.write(fd, f"{action} {key}\n".encode())
        finally:
            os.close(fd)

    def keys(self, action: str) -> set[str]:
        prefix = f"{action}@"
        return {p.name[len(prefix) :] for p in self.root.iterdir() if p.name.startswith(prefix)}


def make_kit(home: Path, ledger: Ledger) -> AgentKit:
    registry = CompensatorRegistry()
    kit = AgentKit(home=home, registry=registry)

    @kit.compensator("kh.refund")
    def refund(idempotency_key: str, result: dict[str, str] | None = None) -> None:
        ledger.effect("refund", idempotency_key.removesuffix("/compensate"))

    def charged(idempotency_key: str, amount: int) -> bool:
        return idempotency_key in ledger.keys("charge")

    @kit.tool(name="kh.charge", compensate="kh.refund", probe=charged)
    def charge(amount: int, idempotency_key: str) -> dict[str, str]:
        ledger.effect("charge", idempotency_key)
        return {"charge": idempotency_key}

    kit.charge = charge  # type: ignore[attr-defined]
    return kit


def agent(home: Path, ledger: Ledger, ack_fd: int, seed: int) -> None:
    """A child's whole life: transactions until it is killed."""
    rng = random.Random(seed)
    kit = make_kit(home, ledger)
    if rng.random() < 0.2:
        kit.recover()  # a child may die during recovery too
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
            os.write(ack_fd, f"{exc.saga_id} {exc.report.status.value}\n".encode())


def spawn(home: Path, ledger: Ledger, seed: int, *, recovery_only: bool = False) -> tuple[int, int]:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child never returns into pytest
        code = 0
        try:
            os.close(read_fd)
            if recovery_only:
                make_kit(home, ledger).recover()
            else:
                agent(home, ledger, write_fd, seed)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(write_fd)
    return pid, read_fd


def reap(pid: int, read_fd: int) -> list[tuple[str, str]]:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    chunks = []
    while chunk := os.read(read_fd, 65536):
        chunks.append(chunk)
    os.close(read_fd)
    lines = b"".join(chunks).decode().splitlines()
    return [tuple(line.split()) for line in lines if len(line.split()) == 2]  # type: ignore[misc]


def check(home: Path, ledger: Ledger, acked: dict[str, str]) -> None:
    kit = make_kit(home, ledger)
    try:
        report = kit.recover()
        assert report.needs_human == (), report.needs_human
        verified = kit.verify()
        assert verified.ok, verified.error
        ends = {
            r.saga: r.data["status"]
            for r in kit.store.records()
            if r.kind == "saga.end" and r.saga is not None
        }
        begun = {r.saga for r in kit.store.records() if r.kind == "saga.begin"}
    finally:
        kit.close()
    for saga_id, status in acked.items():
        assert ends.get(saga_id) == status, f"acknowledged {saga_id} {status} lost"
    assert begun <= set(ends), f"unsettled sagas: {begun - set(ends)}"
    charges, refunds = ledger.keys("charge"), ledger.keys("refund")
    assert refunds <= charges, f"refunded but never charged: {refunds - charges}"
    committed_keys = {
        r.data["idempotency_key"]
        for r in _records(home)
        if r.kind == "step.intent" and ends.get(r.saga or "") == SagaStatus.COMMITTED.value
    }
    assert not (refunds & committed_keys), "a committed saga's charge was refunded"
    assert charges - committed_keys <= refunds, (
        f"charges left unrefunded: {sorted(charges - committed_keys - refunds)[:3]}"
    )


def _records(home: Path) -> Iterator[Record]:
    with FileLogStore(home) as store:
        yield from store.records()


def test_sigkill_harness(tmp_path: Path) -> None:
    rng = random.Random(20261130)
    kills, rounds = 0, 0
    home = ledger_dir = None
    acked: dict[str, str] = {}
    while kills < KILLS:
        if rounds % ROUNDS_PER_HOME == 0:
            home = tmp_path / f"home{rounds}"
            ledger_dir = tmp_path / f"ledger{rounds}"
            ledger_dir.mkdir()
            acked = {}
        assert home is not None
        assert ledger_dir is not None
        ledger = Ledger(ledger_dir)
        children = [spawn(home, ledger, rng.randrange(2**32)) for _ in range(2)]
        time.sleep(rng.uniform(0, 0.03))
        for pid, read_fd in children:
            acked.update(dict(reap(pid, read_fd)))
            kills += 1
        if rng.random() < 0.3:  # kill a recovery pass mid-way
            pid, read_fd = spawn(home, ledger, 0, recovery_only=True)
            time.sleep(rng.uniform(0, 0.01))
            reap(pid, read_fd)
            kills += 1
        check(home, ledger, acked)
        rounds += 1
    assert kills >= KILLS
