"""The durable file store: one JSON-lines log under the agent-saga home.

Durability protocol (what is true when a call returns):

* The home directory, the log file and its watermark file are created durably: each file is
  fsynced and so is every directory that gained an entry, before the first acknowledgement.
* ``append(..., sync=True)`` and ``sync()`` return only after ``fsync`` (``F_FULLFSYNC`` on
  macOS) of the log file covered every byte appended so far. Concurrent callers share one
  fsync (group commit). After each fsync the synced length is written to ``log.synced`` (the
  watermark; not itself fsynced, so after a power loss it can only be behind, never ahead).
* Appends from several processes sharing a home are serialized by an exclusive ``flock`` on
  ``log.lock``, held for the whole batch; the chain continues from the current tail, re-read and
  verified when another process has appended.
* A failed write or fsync puts the store in a failed state: nothing from that call is
  acknowledged, the fsync is not retried, and every later append raises
  :class:`StoreFailedError` until the log is reopened (and so re-verified from disk).
* Opening verifies the whole chain. Damage is repaired only when it is a torn tail: it lies
  beyond the synced watermark and no record follows it. The discarded bytes are kept in
  ``log.jsonl.broken.<n>``, the log is truncated and fsynced, and a ``store.repaired`` record
  is appended. Any other damage fails closed with :class:`CorruptLogError` naming the offset.
* Records overwrite zeros preallocated (written and fsynced) ahead of them, so syncing a record
  does not change the file's size; closing trims the file back to its last record.
* Each process holds an exclusive lock on ``owners/<owner_id>.lock`` while the store is open,
  so another process can tell a dead owner from a live one.
* Assumption (stated in the guarantees manifest): the disk has powersafe-overwrite semantics,
  i.e. a crash while appending never garbles bytes that were already synced. Ext4, XFS and
  btrfs on modern drives provide it.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from .._errors import CorruptLogError, StoreFailedError
from .chain import Chain
from .codec import CodecError
from .files import (
    LOCK_NAME,
    LOG_NAME,
    OS,
    OWNERS_DIR,
    WATERMARK_NAME,
    encode_watermark,
    ensure_dir,
    file_store_traits,
    open_durably,
    refuse_network_fs,
    write_fully,
)
from .forks import ForkGuard
from .fs import FileSystem
from .groupcommit import Ticket
from .locks import FileLease, hold_owner_lock, owner_alive, take_lease
from .read import follow_log, iter_log, verify_file
from .records import GENESIS, Entry, Record
from .repair import repair_entry, scan_on_open
from .scan import scan
from .store import VerifyReport

PREALLOCATE = 256 * 1024
"""Bytes of zeros the log file grows by, so that syncing a record does not change its size."""


class FileLogStore:
    """A durable, hash-chained log in ``<home>/log.jsonl`` (see the module docstring).

    Args:
        home: the agent-saga home directory (created durably if missing).
        key: makes the chain keyed (HMAC-SHA-256).
        fs: the file system (tests pass a simulated one).
        allow_network_fs: skip the refusal of NFS/SMB-like file systems, where ``flock`` and
            ``fsync`` do not give the guarantees this store relies on.

    Raises:
        CorruptLogError: the log is damaged other than by a torn tail.
        ConfigurationError: the home is on a network file system.
    """

    kind = "file"

    def __init__(
        self,
        home: str | os.PathLike[str],
        *,
        key: bytes | None = None,
        fs: FileSystem | None = None,
        allow_network_fs: bool = False,
        preallocate: int = PREALLOCATE,
    ) -> None:
        self.home = Path(home)
        self.path = self.home / LOG_NAME
        self._fs = fs = fs or OS
        self._chain = Chain(key)
        self.repairs: list[dict[str, object]] = []
        ensure_dir(self.home, fs)
        if not allow_network_fs:
            refuse_network_fs(fs, self.home)
        self._fd = open_durably(fs, self.home, LOG_NAME)
        self._preallocate = max(1, preallocate)
        self._mark_fd = open_durably(fs, self.home, WATERMARK_NAME)
        self._lock_fd = fs.open_rw(str(self.home / LOCK_NAME))
        self.owner_id = f"{os.getpid()}-{os.urandom(6).hex()}"
        self.fork_guard = ForkGuard(f"the log store at {self.path}")
        self._owner_fd = hold_owner_lock(self._fs, self.home, self.owner_id)
        self._mutex = threading.Lock()
        self._queue: list[Ticket] = []
        self._leader_active = False
        self._failed: BaseException | None = None
        self._closed = False
        self._seq, self._prev, self._end = 0, GENESIS, 0
        self._fs.lock(self._lock_fd, blocking=True)
        try:
            self._open_scan()
        except BaseException:
            self._fs.unlock(self._lock_fd)
            self._release_files()
            raise
        self._fs.unlock(self._lock_fd)
        self._written = self._synced = self._end
        self._capacity = self._fs.size(self._fd)

    def _open_scan(self) -> None:
        """Verify the log; a repaired torn tail is recorded by a ``store.repaired`` record."""
        tail, repair = scan_on_open(self._fs, self._fd, self._mark_fd, self._chain, self.home)
        self._seq, self._prev, self._end = tail.seq, tail.hash, tail.end
        if repair is not None:
            self.repairs.append(repair)
            self._capacity = self._fs.size(self._fd)
            self._append_locked([repair_entry(repair)])
            self._fs.fsync(self._fd)
            self._write_watermark(self._end)

    # -- writing ------------------------------------------------------------------------------

    def append(self, entries: Sequence[Entry], *, sync: bool) -> list[Record]:
        """Seal and write ``entries`` as one batch; with ``sync``, return only once durable.

        Group commit: callers queue their batches; the caller at the head of the queue leads.
        The leader takes the file lock once, seals and writes every queued batch in one write,
        fsyncs once if any of them asked for it, then wakes each follower exactly once (and the
        next head, which leads the batch that queued meanwhile). A batch whose entries cannot
        be encoded fails alone; a write or fsync error fails the store.
        """
        self.fork_guard.check()  # before the mutex: a parent's thread may have held it at fork
        ticket = Ticket(entries, sync)
        with self._mutex:
            self._check_usable()
            self._queue.append(ticket)
            lead = not self._leader_active
            self._leader_active = True
        if not lead:
            ticket.wait()
        if not ticket.done:
            self._lead()
        if ticket.error is not None:
            raise ticket.error
        return ticket.records

    def sync(self) -> None:
        """Make every record appended so far durable."""
        if self._synced < self._written or self._failed is not None:
            self.append([], sync=True)

    def _lead(self) -> None:
        """Write and (if asked) fsync everything queued, then hand over leadership."""
        with self._mutex:
            batch, self._queue = self._queue, []
        error: Exception | None = None
        interrupted: BaseException | None = None
        try:
            if self._failed is not None:
                raise StoreFailedError(
                    f"{self.path}: store failed ({self._failed}); reopen it to re-verify from disk"
                )
            self._fs.lock(self._lock_fd, blocking=True)
            try:
                self._catch_up()
                lines = [line for ticket in batch for line in self._seal(ticket)]
                if lines:
                    self._write_all(b"".join(lines))
            finally:
                self._fs.unlock(self._lock_fd)
            self._written = self._end
            wants_sync = any(t.sync and t.error is None for t in batch)
            if wants_sync and self._synced < self._written:
                self._fsync()
        except (StoreFailedError, CorruptLogError) as exc:
            error = exc
        except BaseException as exc:  # interrupted mid-batch: the file may hold part of it
            self._fail(exc)
            interrupted = exc
            error = StoreFailedError(f"{self.path}: the writing thread was interrupted: {exc!r}")
        with self._mutex:
            successor = self._queue[0] if self._queue else None
            self._leader_active = successor is not None
        for ticket in batch:
            if error is not None and ticket.error is None:
                ticket.error = error
            ticket.finish()
        if successor is not None:
            successor.wake()
        if interrupted is not None:
            raise interrupted

    def _fsync(self) -> None:
        upto = self._written
        try:
            self._fs.fsync(self._fd)
            self._write_watermark(upto)
        except OSError as exc:  # never retried: the kernel may have dropped the dirty pages
            self._fail(exc)
            raise StoreFailedError(f"fsync of {self.path} failed: {exc}") from exc
        self._synced = max(self._synced, upto)

    def _seal(self, ticket: Ticket) -> list[bytes]:
        seq, prev = self._seq, self._prev
        lines: list[bytes] = []
        try:
            for entry in ticket.entries:
                seq += 1
                record, line = self._chain.seal(entry, seq, prev)
                ticket.records.append(record)
                lines.append(line)
                prev = record.hash
        except CodecError as exc:  # this batch only: nothing of it is written
            ticket.error, ticket.records = exc, []
            return []
        self._seq, self._prev = seq, prev
        return lines

    def _append_locked(self, entries: Sequence[Entry]) -> list[Record]:
        """Seal and write while already holding the file lock (used when opening)."""
        ticket = Ticket(entries, sync=False)
        lines = self._seal(ticket)
        if ticket.error is not None:
            raise ticket.error
        self._write_all(b"".join(lines))
        return ticket.records

    def _write_all(self, data: bytes) -> None:
        """Write ``data`` at the log's end, inside preallocated space (holding the file lock).

        Records overwrite zero bytes that were written and fsynced beforehand, so syncing them
        does not change the file's size: the fsync flushes data only, which is cheaper than an
        append's. The space grows by ``preallocate`` bytes at a time.
        """
        try:
            if self._end + len(data) > self._capacity:
                self._grow(self._end + len(data))
            self._end += write_fully(self._fs, self._fd, data, offset=self._end)
        except OSError as exc:
            self._fail(exc)
            raise StoreFailedError(f"write to {self.path} failed: {exc}") from exc

    def _grow(self, needed: int) -> None:
        size = self._fs.size(self._fd)
        target = -(-needed // self._preallocate) * self._preallocate
        if size < target:
            write_fully(self._fs, self._fd, bytes(target - size), offset=size)
            self._fs.fsync(self._fd)  # the new size is durable before records land in it
        self._capacity = max(target, size)

    def _write_watermark(self, offset: int) -> None:
        """Record the synced length (not fsynced: after a power loss it can only lag)."""
        self._fs.pwrite(self._mark_fd, encode_watermark(offset), 0)

    def _fail(self, exc: BaseException) -> None:
        if self._failed is None:
            self._failed = exc

    def _check_usable(self) -> None:
        if self._closed:
            raise StoreFailedError(f"{self.path}: store is closed")
        if self._failed is not None:
            raise StoreFailedError(
                f"{self.path}: store failed ({self._failed}); reopen it to re-verify from disk"
            )

    def _catch_up(self) -> None:
        """Continue the chain from the log's current end (another process may have appended)."""
        probe = self._fs.pread(self._fd, 1, self._end)
        if probe == b"\x00":
            return  # free space: nothing was appended since our last write
        size = self._fs.size(self._fd)
        self._capacity = size
        if size == self._end:
            return
        if size < self._end:
            raise CorruptLogError(
                str(self.path), size, f"log shrank from {self._end} bytes while open"
            )
        tail = scan(
            self._fs, self._fd, self._chain, str(self.path),
            start=self._end, seq=self._seq, prev=self._prev, end=size,
        )  # fmt: skip
        if tail.damage is not None:
            self._fail(tail.damage)
            raise tail.damage
        self._seq, self._prev, self._end = tail.seq, tail.hash, tail.end

    # -- reading ------------------------------------------------------------------------------

    def records(self) -> Iterator[Record]:
        """The records now on disk, verified while read (raises :class:`CorruptLogError`)."""
        return (record for _, record in iter_log(self.path, self._chain, self._fs))

    @property
    def on_real_files(self) -> bool:
        """True unless the store runs on an injected (simulated or faulty) file system."""
        return self._fs is OS

    def follow(self, start: int, seq: int, prev: str) -> Iterator[tuple[int, Record]]:
        """Records after record ``seq`` ending at byte ``start`` (see :func:`follow_log`)."""
        return follow_log(self.path, self._chain, self._fs, start, seq, prev)

    def verify(self) -> VerifyReport:
        """Re-read and re-verify the whole file from disk."""
        return verify_file(self.path, self._chain, self._fs)

    def health(self) -> list[str]:
        problems: list[str] = []
        if self._closed:
            return ["log store is closed"]
        if self._failed is not None:
            problems.append(f"log store failed: {self._failed}")
        try:
            size = self._fs.size(self._fd)
            if size < self._end:
                problems.append(f"log file shrank to {size} bytes (had {self._end})")
            if not os.access(self.path, os.W_OK) and self._fs is OS:
                problems.append(f"log file {self.path} is not writable")
        except OSError as exc:
            problems.append(f"log file cannot be inspected: {exc}")
        return problems

    def describe(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "path": str(self.path),
            **file_store_traits(),
            "preallocated_bytes": self._preallocate,
            "keyed_chain": self._chain.keyed,
        }

    # -- owners and leases ------------------------------------------------------------------

    def owner_alive(self, owner_id: str) -> bool:
        """False when ``owner_id``'s lock file is gone or its lock can be taken (owner dead)."""
        if owner_id == self.owner_id:
            return not self._closed
        return owner_alive(self._fs, self.home, owner_id)

    def lease(self, name: str, *, ttl: float) -> FileLease | None:
        """An exclusive lock on ``leases/<name>``, held until released or the holder dies.

        ``ttl`` is not needed here: the kernel releases a dead holder's lock at once.
        """
        return take_lease(self._fs, self.home, name)

    def close(self) -> None:
        """Sync what was written, then release the file and the owner lock. Idempotent.

        In a process forked after the store was opened, only this process's descriptors are
        closed: the parent's locks, owner file and preallocated space are left as they are.
        """
        if self._closed:
            return
        if self.fork_guard.inherited:
            self._closed = True
            self._release_files()  # closing a copy of a descriptor releases no flock
            return
        try:
            if self._failed is None and self._synced < self._written:
                self.sync()
            if self._failed is None:
                with contextlib.suppress(CorruptLogError, OSError):  # trimming is a courtesy
                    self._trim()
        finally:
            self._closed = True
            owner_path = str(self.home / OWNERS_DIR / f"{self.owner_id}.lock")
            with contextlib.suppress(OSError):
                self._fs.unlink(owner_path)
            self._release_files()

    def _trim(self) -> None:
        """Give back the preallocated space, so a closed log is plain JSON lines."""
        self._fs.lock(self._lock_fd, blocking=True)
        try:
            self._catch_up()
            if self._fs.size(self._fd) > self._end:
                self._fs.truncate(self._fd, self._end)
                self._fs.fsync(self._fd)
        finally:
            self._fs.unlock(self._lock_fd)

    def _release_files(self) -> None:
        for fd in (self._fd, self._mark_fd, self._lock_fd, self._owner_fd):
            try:
                self._fs.close(fd)
            except OSError:
                continue

    def __enter__(self) -> FileLogStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
