"""The children of the SIGKILL harness (``test_kill_harness.py``): what each one runs, and the
fork server they are forked from.

A child is a real process of its own, forked from a fork server: this file run as a script
(``python kill_children.py FD``), a fresh interpreter that imports agent-saga and the modules a
kit loads on its first use once, then forks a child per request and starts no thread of its own.
A child therefore starts without importing anything, and with nothing of the pytest worker: not
its memory, its open files (it holds only the standard streams and its own pipe) or its threads
(a child checks that it has none but its own). It opens its own kit on the harness's home,
reports ``ready -`` on its pipe, then works until the parent SIGKILLs it or, a recovery worker,
recovers and exits.

The parent talks to the server over a ``SOCK_SEQPACKET`` socket pair, one request and one reply
at a time: ``fork`` (with the child's pipe as an attached file descriptor) answers the child's
pid; ``wait PID`` reaps that child and answers its exit status (``-9`` for a SIGKILL). A child is
reaped only when asked, so its pid cannot be reused before the parent's kill has landed. When
the parent closes its end, the server SIGKILLs and reaps the children it still has, and exits.

The witnesses are outside the children: effects are files in a :class:`Ledger`, and a child
acknowledges a transaction on its pipe only after the transaction returned.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

from agent_saga import AgentKit, CompensatorRegistry, FileLogStore, LogStore, SagaRolledBack

FENCED = 3
"""A recovery worker's exit status when another worker declared it dead and fenced it."""
PG_OWNER_TTL = 0.3
PG_LEASE_TTL = 1.0
PRELOAD = (
    "agent_saga.proofs._checkpoints",
    "agent_saga.proofs._signing",  # and cryptography: a kit's checkpointer signs
    "agent_saga._history.recovery",
    "agent_saga._history.indexed",
    "agent_saga._history.budgets",
    "agent_saga._log.sagaindex",
    "agent_saga._log.follow",
    "tomllib",
)
"""What the fork server imports once, so that no child imports it again."""
PRELOAD_POSTGRES = ("agent_saga._postgres.store", "psycopg", "psycopg.sql", "psycopg.conninfo")
"""psycopg itself is imported on first use (``require_psycopg``): without it here, every
PostgreSQL child imported it again (most of that harness's CPU)."""
MESSAGE_BYTES = 4096


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


def child(
    backend: Backend, home: Path, ledger: Ledger, seed: int, recovery_only: bool, write_fd: int
) -> None:  # pragma: no cover - runs in the child, which never returns
    """A child's whole process: ``ready -`` once its kit is open, then its work; it exits with
    :data:`FENCED` when it was a recovery worker fenced by the other one, 1 on any other error."""
    code = 0
    kit = None
    try:
        others = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
        assert not others, f"a child started with threads it did not start: {others}"
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


def _fenced(kit: AgentKit | None) -> bool:
    return kit is not None and not kit.store.owner_alive(kit.store.owner_id)


class ForkServer:
    """The parent's side: start the server, have it fork children, reap them.

    Use as a context manager; leaving it closes the socket, which makes the server kill and
    reap whatever child is left and exit.
    """

    def __init__(self, warm_up: Path, *, postgres: bool = False) -> None:
        """``warm_up``: a directory (new, under the test's temporary directory) where the server
        runs a kit once before it forks anything, so that no child pays for a first use."""
        self._socket, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            self._server = subprocess.Popen(
                [sys.executable, __file__, str(theirs.fileno()), str(warm_up)]
                + (["postgres"] if postgres else []),
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
            )

    def fork(
        self, backend: Backend, home: Path, ledger: Ledger, seed: int, recovery_only: bool
    ) -> tuple[int, int]:
        """A new child's pid, and the read end of its pipe (the child holds the only write end)."""
        request = {
            "url": backend.url,
            "home": str(home),
            "ledger": str(ledger.root),
            "seed": seed,
            "recovery_only": recovery_only,
        }
        read_fd, write_fd = os.pipe()
        try:
            socket.send_fds(self._socket, [json.dumps(request).encode()], [write_fd])
        finally:
            os.close(write_fd)
        return int(self._reply()), read_fd

    def wait(self, pid: int) -> int:
        """Reap child ``pid``: its exit code, or minus the signal that ended it."""
        self._socket.send(f"wait {pid}".encode())
        return int(self._reply())

    def _reply(self) -> str:
        reply = self._socket.recv(MESSAGE_BYTES).decode()
        assert reply, f"the fork server stopped (exit status {self._server.wait()})"
        return reply

    def __enter__(self) -> ForkServer:
        return self

    def __exit__(self, failure: type[BaseException] | None, *exc: object) -> None:
        self._socket.close()
        code = self._server.wait(60)
        assert failure is not None or code == 0, f"the fork server failed (exit status {code})"


def warm_up(directory: Path) -> None:  # pragma: no cover - in the server process
    """Run a kit once in ``directory``: a committed and a rolled-back transaction, a recovery
    pass, a verification, a checkpoint; every thread it starts is stopped when this returns."""
    (directory / "ledger").mkdir(parents=True)
    kit = make_kit(Backend(), directory / "home", Ledger(directory / "ledger"))
    try:
        for fail in (False, True):
            with contextlib.suppress(SagaRolledBack), kit.transaction("warm-up"):
                kit.charge(1)  # type: ignore[attr-defined]
                if fail:
                    raise RuntimeError("warm-up rollback")
        kit.recover()
        assert kit.verify().ok
    finally:
        kit.close()


def serve(
    sock: socket.socket, warm: Path, postgres: bool
) -> None:  # pragma: no cover - the server process
    """The server's loop (see the module docstring); returns when the parent closes its end."""
    for name in PRELOAD + (PRELOAD_POSTGRES if postgres else ()):
        importlib.import_module(name)
    warm_up(warm)
    assert threading.active_count() == 1, "the fork server must not keep a thread running"
    gc.freeze()  # a child's collections then leave the preloaded objects' pages shared
    children: set[int] = set()
    try:
        while True:
            message, fds, _, _ = socket.recv_fds(sock, MESSAGE_BYTES, 1)
            if not message:
                return
            if fds:
                pid = os.fork()
                if pid == 0:
                    sock.close()
                    request = json.loads(message)
                    child(
                        Backend(request["url"]),
                        Path(request["home"]),
                        Ledger(Path(request["ledger"])),
                        request["seed"],
                        request["recovery_only"],
                        fds[0],
                    )
                os.close(fds[0])
                children.add(pid)
                sock.send(str(pid).encode())
            else:
                pid = int(message.decode().removeprefix("wait "))
                children.discard(pid)
                sock.send(str(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])).encode())
    finally:
        for pid in children:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


if __name__ == "__main__":  # pragma: no cover - the fork server process
    with socket.socket(fileno=int(sys.argv[1])) as parent:
        serve(parent, Path(sys.argv[2]), postgres=sys.argv[3:] == ["postgres"])
