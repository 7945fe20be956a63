"""Group commit for the PostgreSQL log store: the threads of one process share round trips.

Every ``append`` joins a queue. One caller at a time leads: it takes every pending append (up
to :data:`MAX_GROUPS`), writes them as one batch (``write``), and hands each waiter its own
records, or the error, before the next leader takes what queued meanwhile. A batch holding any
``sync`` append is flushed in the same message, so a waiter is acknowledged only after the
commit (and, for ``sync``, the flush) that holds its records.

The store's durable watermark lives here too: :meth:`GroupCommit.sync_to` commits the owner's
heartbeat synchronously on a second connection (concurrent callers share one such flush), and
checks that the last record this store appended is still stored. Any error while appending or
flushing fails the store: nothing from that batch is acknowledged, later appends raise
:class:`StoreFailedError` until it is reopened.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .._errors import LeaseLostError, StoreFailedError
from .._log.forks import ForkGuard
from .._log.records import GENESIS, Entry, Record
from .connection import one_line
from .owners import OwnerExpired
from .serverseal import SealMismatch
from .write import NotSent, Outcome, Unknown

if TYPE_CHECKING:
    from psycopg.sql import Composed

    from .connection import PgSession
    from .owners import FleetOwner
    from .serverseal import ServerSealWriter
    from .write import BatchWriter

MAX_GROUPS = 512
"""The most appends one batch carries; the rest wait for the next."""
GATHER_SECONDS = 0.0002
"""How long a leader waits for the writers of the last batch to queue again when fewer have."""


class _Waiter:
    __slots__ = ("entries", "fence", "flushed", "outcome", "sync")

    def __init__(self, entries: Sequence[Entry], sync: bool, fence: Composed | None) -> None:
        self.entries, self.sync, self.fence = entries, sync, fence
        self.outcome: Outcome | BaseException | None = None
        self.flushed = False


class GroupCommit:
    """The write side of one store: the append queue, its leader, and the durable watermark.

    Args:
        main: the session batches are written on (its lock is held while one is).
        owner: this store's owner row (its heartbeat is the flush of :meth:`sync_to`).
        writer: writes one batch.
        where: names the store in messages.
        fork_guard: the store's; the sessions belong to the process that opened it.
    """

    def __init__(
        self,
        main: PgSession,
        owner: FleetOwner,
        writer: BatchWriter | ServerSealWriter,
        where: str,
        fork_guard: ForkGuard,
    ) -> None:
        self._main, self._owner, self._writer = main, owner, writer
        self.where = where
        self._fork_guard = fork_guard
        self._queue = threading.Condition()
        self._pending: list[_Waiter] = []
        self._leading = False
        self._last_batch = 1
        self._sync_cond = threading.Condition()
        self._syncing = False
        self.failed: BaseException | None = None
        self.closed = False
        self.written: tuple[int, str] = (0, GENESIS)
        """The last record this store appended (``seq``, ``hash``)."""
        self.synced = 0
        """Every record this store appended up to this ``seq`` is durable."""

    def check_usable(self) -> None:
        """Raise :class:`StoreFailedError` if the store is closed or failed (or forked)."""
        self._fork_guard.check()
        if self.closed:
            raise StoreFailedError(f"{self.where}: store is closed")
        if self.failed is not None:
            raise StoreFailedError(
                f"{self.where}: store failed ({one_line(self.failed)}); reopen it"
            )

    def fail(self, exc: BaseException) -> None:
        """Put the store in the failed state (the first cause is kept)."""
        if self.failed is None:
            self.failed = exc

    def append(
        self, entries: Sequence[Entry], sync: bool, fence: Composed | None = None
    ) -> list[Record]:
        """Queue ``entries``; returns their records once committed (with ``sync``, durable).

        With ``fence`` (a lease's, see ``owners``) the entries are a batch of their own whose
        transaction runs the fence too: they commit only while the lease is held.

        Raises:
            LeaseLostError: the fence failed; nothing of these entries was written (the store
                goes on).
            StoreFailedError: the store is closed or failed, or the batch failed (nothing of it
                is acknowledged, and the store is failed).
            CodecError: these entries cannot be sealed (nothing of them is written; the store
                and the other appends of the batch go on).
        """
        self._fork_guard.check()  # before any lock: a parent's thread may have held one
        waiter = _Waiter(entries, sync, fence)
        with self._queue:
            self.check_usable()
            self._pending.append(waiter)
            while waiter.outcome is None:
                if self._leading:
                    self._queue.wait()
                    continue
                self._leading = True
                if len(self._pending) < self._last_batch:  # the last batch's writers may be back
                    self._queue.wait(GATHER_SECONDS)
                batch = self._next_batch()
                self._last_batch = len(batch)
                self._queue.release()
                try:
                    self._lead(batch)
                finally:
                    self._queue.acquire()
                    self._leading = False
                    self._queue.notify_all()
        outcome = waiter.outcome
        if isinstance(outcome, BaseException):
            raise outcome
        if sync and not waiter.flushed:
            self.sync_to(outcome[-1].seq if outcome else self.written[0])
        return outcome

    def _next_batch(self) -> list[_Waiter]:
        """Take the next batch off the queue: a fenced append alone, else the unfenced ones
        before the next fenced append (at most :data:`MAX_GROUPS`)."""
        pending = self._pending
        size = 1 if pending[0].fence is not None else 0
        while size < min(len(pending), MAX_GROUPS) and pending[size].fence is None:
            size += 1
        batch = pending[:size]
        del pending[:size]
        return batch

    def _lead(self, batch: list[_Waiter]) -> None:
        """Write ``batch`` as one transaction and give every waiter in it its outcome."""
        import psycopg

        flush = any(waiter.sync for waiter in batch)
        try:
            with self._main.lock:
                self.check_usable()
                groups = [waiter.entries for waiter in batch]
                outcomes, flushed = self._write(groups, flush, batch[0].fence)
        except LeaseLostError as exc:  # the transaction rolled back; the store goes on
            for waiter in batch:
                waiter.outcome = LeaseLostError(str(exc))
            return
        except StoreFailedError as exc:
            for waiter in batch:
                waiter.outcome = StoreFailedError(str(exc))
            return
        except (OwnerExpired, NotSent, Unknown, SealMismatch, psycopg.Error) as exc:
            self.fail(exc)
            for waiter in batch:
                waiter.outcome = StoreFailedError(f"{self.where}: append failed: {one_line(exc)}")
            return
        except BaseException as exc:  # interrupted: the batch's fate is unknown
            self.fail(exc)
            self._main.discard()  # an open transaction would keep the log's lock held
            for waiter in batch:
                waiter.outcome = StoreFailedError(f"{self.where}: append interrupted")
            raise
        last: Record | None = None
        for waiter, outcome in zip(batch, outcomes, strict=True):
            waiter.outcome, waiter.flushed = outcome, flushed
            if isinstance(outcome, list) and outcome:
                last = outcome[-1]
        if last is not None:
            with self._sync_cond:
                self.written = (last.seq, last.hash)
                if flushed:
                    self.synced = max(self.synced, last.seq)

    def _write(
        self, groups: list[Sequence[Entry]], flush: bool, fence: Composed | None
    ) -> tuple[list[Outcome], bool]:
        """One batch; a connection that broke is replaced and the batch settled on the new one."""
        writer = self._writer
        try:
            return writer.write(self._main.connection(), groups, flush, fence)
        except NotSent:
            return writer.retry(self._main.connection(), groups, flush, None, fence)
        except Unknown as exc:
            return writer.retry(self._main.connection(), groups, flush, exc, fence)

    def sync_to(self, target: int) -> None:
        """Return once every record up to ``target`` this store appended is durable.

        Raises:
            StoreFailedError: the flush failed (the store is failed) or had failed before.
        """
        with self._sync_cond:
            while self.synced < target:
                if self.failed is not None:
                    raise StoreFailedError(f"{self.where}: store failed: {one_line(self.failed)}")
                if self._syncing:
                    self._sync_cond.wait()
                    continue
                self._syncing = True
                upto = self.written
                self._sync_cond.release()
                try:
                    self.flush(upto)
                except Exception as exc:
                    self.fail(exc)
                finally:
                    self._sync_cond.acquire()
                    self._syncing = False
                    self._sync_cond.notify_all()
                if self.failed is None:
                    self.synced = max(self.synced, upto[0])
            if self.failed is not None:
                raise StoreFailedError(f"{self.where}: store failed: {one_line(self.failed)}")

    def flush(self, upto: tuple[int, str]) -> None:
        """Commit a heartbeat synchronously; the record ``upto`` must still be stored.

        Raises:
            OwnerExpired: the owner row expired or was removed.
            StoreFailedError: the record ``upto`` is gone (lost in a server crash).
            psycopg.Error: the server could not be reached.
        """
        seq, digest = upto
        stored = self._owner.beat(seq)
        if seq and stored != digest:
            raise StoreFailedError(f"record {seq} appended by this store is no longer stored")


class Heartbeat:
    """Refreshes the owner row every third of its ttl on a daemon thread.

    An :class:`OwnerExpired` fails the store; other errors are kept in :attr:`error` (for
    ``health``) and retried at the next beat.
    """

    def __init__(self, commit: GroupCommit, ttl: float) -> None:
        self._commit, self._ttl = commit, ttl
        self.error: Exception | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="agent-saga-pg", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._ttl / 3):
            try:
                self._commit.flush((0, GENESIS))
            except OwnerExpired as exc:
                self._commit.fail(exc)
                return
            except Exception as exc:
                self.error = exc
            else:
                self.error = None

    def stop(self) -> None:
        """Stop beating and wait for the thread."""
        self._stop.set()
        self._thread.join()


__all__ = ["MAX_GROUPS", "GroupCommit", "Heartbeat"]
