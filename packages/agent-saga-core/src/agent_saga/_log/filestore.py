"""The durable file store: a JSON-lines log in segments under the agent-saga home.

Durability protocol (what is true when a call returns):

* The home directory, the log file and its watermark file are created durably: each file is
  fsynced and so is every directory that gained an entry, before the first acknowledgement.
* ``append(..., sync=True)`` and ``sync()`` return only after ``fsync`` (``F_FULLFSYNC`` on
  macOS) of the log file covered every byte appended so far. Concurrent callers share one
  fsync (group commit). After each fsync the synced length is written to ``log.synced`` (the
  watermark; not itself fsynced, so after a power loss it can only be behind, never ahead).
* Appends from several processes sharing a home are serialized by an exclusive ``flock`` on
  ``log.lock``, held for the whole batch; the chain continues from the current tail, re-read and
  verified when another process has appended. A store alone on its home keeps the lock
  between batches until another process (or store) asks for it (solo mode, :mod:`.solo`).
* A failed write or fsync puts the store in a failed state: nothing from that call is
  acknowledged, the fsync is not retried, and every later append raises
  :class:`StoreFailedError` until the log is reopened (and so re-verified from disk).
* The log is a sequence of segments (:mod:`.segments`): ``log.jsonl`` first, then
  ``segments/<first seq>.jsonl``. The open one is sealed once it holds ``segment_bytes`` bytes
  or ``segment_records`` records (:mod:`.writer`); a sealed segment is never written again.
* Opening checks the sealed segments from their summaries (:mod:`.opening`) and verifies the
  open segment's last stretch (:mod:`.opentail`: a constant amount, whatever the log's age).
  Damage is repaired only when it is a torn tail: it lies beyond the synced watermark and no
  record follows it. The discarded bytes are kept in
  ``<segment>.broken.<n>``, the segment is truncated and fsynced, and a ``store.repaired``
  record is appended. Any other damage fails closed with :class:`CorruptLogError` naming the
  segment and the offset. ``verify()`` reads every segment.
* Records overwrite zeros preallocated (written and fsynced) ahead of them, so syncing a record
  does not change the file's size and needs only ``fdatasync`` (the data, no timestamps; still
  ``F_FULLFSYNC`` on macOS); closing trims the file back to its last record.
* Each process holds an exclusive lock on ``owners/<owner_id>.lock`` while the store is open,
  so another process can tell a dead owner from a live one.
* Assumption (stated in the guarantees manifest): the disk has powersafe-overwrite semantics,
  i.e. a crash while appending never garbles bytes that were already synced. Ext4, XFS and
  btrfs on modern drives provide it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from .._errors import CorruptLogError
from .chain import Chain
from .files import (
    LOCK_NAME,
    LOG_NAME,
    OS,
    OWNERS_DIR,
    ensure_dir,
    file_store_traits,
    refuse_network_fs,
)
from .forks import ForkGuard
from .fs import FileSystem
from .locks import FileLease, hold_owner_lock, owner_alive, take_lease
from .opening import open_layout
from .opentail import scan_tail_on_open
from .read import follow_log, iter_log, verify_file
from .records import Entry, Record
from .repair import repair_entry
from .segments import SEGMENT_BYTES, SEGMENT_RECORDS
from .solo import SoloMode, lock_for_writing, take_log_lock
from .store import VerifyReport
from .writer import SegmentWriter

PREALLOCATE = 256 * 1024
"""Bytes of zeros the log file grows by, so that syncing a record does not change its size."""


class FileLogStore:
    """A durable, hash-chained log in ``<home>/log.jsonl`` and its later segments (see the
    module docstring).

    Args:
        home: the agent-saga home directory (created durably if missing).
        key: makes the chain keyed (HMAC-SHA-256).
        fs: the file system (tests pass a simulated one).
        allow_network_fs: skip the refusal of NFS/SMB-like file systems, where ``flock`` and
            ``fsync`` do not give the guarantees this store relies on.
        preallocate: bytes of zeros the open segment grows by.
        segment_bytes: the open segment is sealed once it holds this many bytes...
        segment_records: ...or this many records.
        solo: let the store keep ``log.lock`` between batches while no other process asks for
            it (real files only; see :mod:`.solo`). Off by default: turn it on only where every
            process writing the home runs a release with solo mode.

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
        segment_bytes: int = SEGMENT_BYTES,
        segment_records: int = SEGMENT_RECORDS,
        solo: bool = False,
    ) -> None:
        self.home = Path(home)
        self.path = self.home / LOG_NAME
        self._fs = fs = fs or OS
        self._chain = Chain(key)
        self.repairs: list[dict[str, object]] = []
        ensure_dir(self.home, fs)
        if not allow_network_fs:
            refuse_network_fs(fs, self.home)
        self._lock_fd = fs.open_rw(str(self.home / LOCK_NAME))
        self.owner_id = f"{os.getpid()}-{os.urandom(6).hex()}"
        self.fork_guard = ForkGuard(f"the log store at {self.path}")
        self._owner_fd = hold_owner_lock(self._fs, self.home, self.owner_id)
        self._writer: SegmentWriter | None = None
        from .sagaindex import SagaIndex  # sqlite3: paid by opening a store, not by importing

        self.saga_index = SagaIndex(self.home, self._chain) if fs is OS else None
        """The saga index beside the log (real files only); the writer keeps it close behind
        the log without blocking a transaction, readers catch it up (see :mod:`.sagaindex`)."""
        self._solo = SoloMode(self.home, self._lock_fd) if solo and fs is OS else None
        if self._solo is not None:
            take_log_lock(self._lock_fd, self.home)
        else:
            lock_for_writing(self._fs, self._lock_fd, self.home)
        try:
            layout, seq, prev = open_layout(fs, self.home, self._chain)
            self._writer = SegmentWriter(
                fs, self.home, self._chain, self._lock_fd, layout.active, prev,
                preallocate=preallocate, segment_bytes=segment_bytes,
                segment_records=segment_records,
            )  # fmt: skip
            self._open_scan(seq, prev)
            if self._writer.over_limit():  # a home written before segments: seal it now
                self._writer.roll()
            if self.saga_index is not None:
                self._writer.on_batch = self.saga_index.follow
        except BaseException:
            self._fs.unlock(self._lock_fd)
            self._release_files()
            raise
        if self._solo is None:
            self._fs.unlock(self._lock_fd)
        else:
            self._writer.solo = self._solo
            self._solo.end(False)  # keeps the lock when nobody waits for it

    def _open_scan(self, seq: int, prev: str) -> None:
        """Verify the open segment; a repaired torn tail is recorded by ``store.repaired``."""
        writer = self._w
        tail, repair = scan_tail_on_open(
            self._fs, writer.fd, writer.mark_fd, self._chain, writer.seg.path, seq=seq, prev=prev
        )
        writer.start(tail.seq, tail.hash, tail.end)
        if repair is not None:
            self.repairs.append(repair)
            writer.capacity = self._fs.size(writer.fd)
            writer.append_locked([repair_entry(repair)])
            self._fs.fsync(writer.fd)
            writer.write_watermark(writer.end)
            writer.written = writer.synced = writer.end

    @property
    def _w(self) -> SegmentWriter:
        assert self._writer is not None
        return self._writer

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
        return self._w.append(entries, sync=sync)

    def sync(self) -> None:
        """Make every record appended so far durable."""
        writer = self._w
        if writer.synced < writer.written or writer.failed is not None:
            self.append([], sync=True)

    # -- reading ------------------------------------------------------------------------------

    def records(self) -> Iterator[Record]:
        """The records now on disk, every segment, verified while read (raises
        :class:`CorruptLogError`)."""
        return (record for _, record in iter_log(self.path, self._chain, self._fs))

    @property
    def on_real_files(self) -> bool:
        """True unless the store runs on an injected (simulated or faulty) file system."""
        return self._fs is OS

    def follow(self, start: int, seq: int, prev: str) -> Iterator[tuple[int, Record]]:
        """Records after record ``seq`` ending at offset ``start`` (see :func:`follow_log`)."""
        return follow_log(self.path, self._chain, self._fs, start, seq, prev)

    def verify(self) -> VerifyReport:
        """Re-read and re-verify every segment from disk."""
        return verify_file(self.path, self._chain, self._fs)

    @property
    def solo_active(self) -> bool:
        """Whether this store holds ``log.lock`` between batches right now (solo mode)."""
        return self._solo is not None and self._solo.active

    @property
    def segment_path(self) -> str:
        """The open segment's file."""
        return self._w.seg.path

    def health(self) -> list[str]:
        writer = self._w
        problems: list[str] = []
        if writer.closed:
            return ["log store is closed"]
        if writer.failed is not None:
            problems.append(f"log store failed: {writer.failed}")
        try:
            size = self._fs.size(writer.fd)
            if size < writer.end:
                problems.append(f"log file shrank to {size} bytes (had {writer.end})")
            if not os.access(writer.seg.path, os.W_OK) and self._fs is OS:
                problems.append(f"log file {writer.seg.path} is not writable")
        except OSError as exc:
            problems.append(f"log file cannot be inspected: {exc}")
        return problems

    def describe(self) -> dict[str, object]:
        writer = self._w
        return {
            "kind": self.kind,
            "path": str(self.path),
            **file_store_traits(),
            "preallocated_bytes": writer.preallocate,
            "segments": {
                "open": str(Path(writer.seg.path).relative_to(self.home)),
                "roll_bytes": writer.segment_bytes,
                "roll_records": writer.segment_records,
            },
            "keyed_chain": self._chain.keyed,
        }

    # -- owners and leases ------------------------------------------------------------------

    def owner_alive(self, owner_id: str) -> bool:
        """False when ``owner_id``'s lock file is gone or its lock can be taken (owner dead)."""
        if owner_id == self.owner_id:
            return not self._w.closed
        return owner_alive(self._fs, self.home, owner_id)

    def lease(self, name: str, *, ttl: float) -> FileLease | None:
        """An exclusive lock on ``leases/<name>``, held until released or the holder dies.

        ``ttl`` is not needed here: the kernel releases a dead holder's lock at once.
        """
        return take_lease(self._fs, self.home, name, self.append)

    def close(self) -> None:
        """Sync what was written, then release the file and the owner lock. Idempotent.

        In a process forked after the store was opened, only this process's descriptors are
        closed: the parent's locks, owner file and preallocated space are left as they are.
        """
        writer = self._w
        if writer.closed:
            return
        if self.fork_guard.inherited:
            writer.closed = True
            self._release_files()  # closing a copy of a descriptor releases no flock
            return
        try:
            if writer.failed is None and writer.synced < writer.written:
                self.sync()
            if self._solo is not None:
                self._solo.stop()
            if writer.failed is None:
                with contextlib.suppress(CorruptLogError, OSError):  # trimming is a courtesy
                    writer.trim()
        finally:
            writer.closed = True
            owner_path = str(self.home / OWNERS_DIR / f"{self.owner_id}.lock")
            with contextlib.suppress(OSError):
                self._fs.unlink(owner_path)
            self._release_files()

    def _release_files(self) -> None:
        if self._solo is not None and not self.fork_guard.inherited:
            self._solo.stop()  # before the descriptors close: the watcher releases the lock
        if self.saga_index is not None:
            self.saga_index.close()
        if self._writer is not None:
            self._writer.release()
        for fd in (self._lock_fd, self._owner_fd):
            try:
                self._fs.close(fd)
            except OSError:
                continue

    def __enter__(self) -> FileLogStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
