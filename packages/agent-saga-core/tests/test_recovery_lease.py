"""Recovery holds its lease while it works, and a worker that lost its lease writes nothing.

A child process runs a saga of two COMPENSABLE steps and is SIGKILLed; then two recovery workers
(threads, each with its own store) pass over the log again and again with a lease shorter than
one pass, while each compensation takes longer than the lease. The compensations are counted
where they land: exactly one per step, whichever worker made them.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from agent_saga import AgentKit, CompensatorRegistry, Entry, Kind, LogStore, SagaStatus
from agent_saga._errors import LeaseLostError
from agent_saga._postgres.store import PostgresLogStore

LEASE = 0.6
"""Seconds a recovery worker's lease lasts without renewal: shorter than one compensation."""
SLOW = 1.0
"""Seconds each compensation takes."""

CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from agent_saga import AgentKit

    home, url, schema = sys.argv[1], sys.argv[2], sys.argv[3]
    store = None
    if url:
        from agent_saga._postgres.store import PostgresLogStore
        store = PostgresLogStore(url, schema=schema, owner_ttl=0.5)
    kit = AgentKit(home=home, store=store)

    @kit.compensator("lease.refund")
    def refund(idempotency_key):
        raise AssertionError("the dead process never compensates")

    @kit.tool(name="lease.charge", compensate="lease.refund")
    def charge(amount, idempotency_key=""):
        return {"charge": idempotency_key}

    with kit.transaction("two charges"):
        charge(1)
        charge(2)
        os.kill(os.getpid(), signal.SIGKILL)
    """
)


def _kill_a_saga(tmp_path: Path, home: Path, url: str = "", schema: str = "") -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    run = subprocess.run(
        [sys.executable, str(script), str(home), url, schema], check=False, capture_output=True
    )
    assert run.returncode == -9, run.stderr.decode()


def _race(open_store: Callable[[], LogStore], home: Path) -> tuple[list[str], list[AgentKit]]:
    """Two workers pass over the log until the saga ended; returns the compensation keys."""
    calls: list[str] = []
    kits: list[AgentKit] = []
    for _ in range(2):
        registry = CompensatorRegistry()

        def refund(idempotency_key: str) -> None:
            time.sleep(SLOW)
            calls.append(idempotency_key)

        registry.register("lease.refund", refund)
        kits.append(AgentKit(home=home, store=open_store(), registry=registry))
    errors: list[BaseException] = []

    def worker(kit: AgentKit) -> None:
        deadline = time.monotonic() + 20
        try:
            while time.monotonic() < deadline and not _ended(kit):
                kit.recover(lease_ttl=LEASE)
                time.sleep(0.05)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(kit,)) for kit in kits]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    return calls, kits


def _ended(kit: AgentKit) -> bool:
    return any(r.kind == Kind.SAGA_END for r in kit.store.records())


def _check(calls: list[str], kit: AgentKit) -> None:
    assert len(calls) == 2, calls
    assert len(set(calls)) == 2  # one compensation per step, each with its own key
    records = list(kit.store.records())
    ends = [r for r in records if r.kind == Kind.SAGA_END]
    assert [e.data["status"] for e in ends] == [SagaStatus.ROLLED_BACK.value]
    assert sum(r.kind == Kind.COMP_INTENT for r in records) == 2
    assert sum(r.kind == Kind.RECOVERY_BEGIN for r in records) == 1
    assert kit.verify().ok


def test_file_store_recovers_a_saga_once_under_a_short_lease(tmp_path: Path, home: Path) -> None:
    _kill_a_saga(tmp_path, home)
    calls, kits = _race(lambda: AgentKit(home=home).store, home)
    try:
        _check(calls, kits[0])
    finally:
        for kit in kits:
            kit.close()


def test_postgres_recovers_a_saga_once_under_a_short_lease(
    tmp_path: Path, home: Path, pg_url: str, schema: str
) -> None:
    _kill_a_saga(tmp_path, home, pg_url, schema)
    time.sleep(0.6)  # the dead child's owner row expires
    calls, kits = _race(lambda: PostgresLogStore(pg_url, schema=schema), home)
    try:
        _check(calls, kits[0])
    finally:
        for kit in kits:
            kit.close()


def test_postgres_lease_taken_over_fences_its_old_holder(pg_url: str, schema: str) -> None:
    with (
        PostgresLogStore(pg_url, schema=schema) as first,
        PostgresLogStore(pg_url, schema=schema) as second,
    ):
        old = first.lease("recover-x", ttl=0.3)
        assert old is not None
        assert old.append([Entry("test.note", "x", {"n": 1}, 0)], sync=True)[0].seq == 1
        assert old.renew(0.3)
        time.sleep(0.4)  # expired, not renewed
        new = second.lease("recover-x", ttl=5)
        assert new is not None
        assert not old.renew(5)  # taken over: not revived
        with pytest.raises(LeaseLostError, match="recover-x"):
            old.append([Entry("test.note", "x", {"n": 2}, 0)], sync=True)
        new.append([Entry("test.note", "x", {"n": 3}, 0)], sync=False)
        first.append([Entry("test.note", "x", {"n": 4}, 0)], sync=True)  # the store goes on
        assert [r.data["n"] for r in second.records()] == [1, 3, 4]
        new.release()


def test_file_lease_writes_until_released(home: Path) -> None:
    with AgentKit(home=home) as kit:
        lease = kit.store.lease("recover-y", ttl=1)
        assert lease is not None
        assert lease.renew(1)
        lease.append([Entry("test.note", "y", {}, 0)], sync=True)
        lease.release()
        assert not lease.renew(1)
        with pytest.raises(LeaseLostError):
            lease.append([Entry("test.note", "y", {}, 0)], sync=True)
        assert sum(r.kind == "test.note" for r in kit.store.records()) == 1
