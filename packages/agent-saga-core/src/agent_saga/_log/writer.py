"""Appending to the file log: group commit, preallocated writes, catching up, rolling segments.

One :class:`SegmentWriter` per open store owns the open segment's descriptors and the chain's
tail (``seq``, hash, byte offset). Its invariants (the durability protocol is stated in
:mod:`.filestore`):

* Every write happens under the exclusive ``flock`` on ``log.lock``, after catching up with
  what other processes appended (verified) and, when another process sealed the segment this
  writer was in, after following the chain into the next segment. In solo mode
  (:mod:`.solo`) the lock has been held since the last round, so there is nothing to catch
  up with and the round takes no lock.
* A segment is sealed (rolled) only under that lock, once it holds ``segment_bytes`` bytes or
  ``segment_records`` records: fsync, trim to the last record, fsync, write and fsync the
  summary (and its directory entry), then create the next segment and its watermark durably.
  A crash at any point leaves a log that opens (see :mod:`.segments`).
* A failed write, fsync or roll fails the writer: nothing more is appended until the store is
  reopened. Records already acknowledged stay acknowledged (a failed roll comes after them).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from .._errors import CorruptLogError, StoreFailedError
from .chain import Chain
from .codec import CodecError
from .files import encode_watermark, ensure_dir, open_durably, write_fully
from .fs import FileSystem
from .groupcommit import Ticket
from .records import Entry, Record
from .scan import scan
from .segments import (
    Segment,
    Summary,
    read_summary,
    segment,
    summary_path,
    write_summary,
)
from .solo import SoloMode, lock_for_writing


class SegmentWriter:
    """Seals and writes batches at the end of a home's log (see the module docstring).

    The caller opens it on the open segment ``seg`` (whose first record follows ``prev``) and
    sets the tail with :meth:`start` after verifying the segment.
    """

    def __init__(
        self,
        fs: FileSystem,
        home: Path,
        chain: Chain,
        lock_fd: int,
        seg: Segment,
        prev: str,
        *,
        preallocate: int,
        segment_bytes: int,
        segment_records: int,
    ) -> None:
        self.fs, self.home, self.chain, self.lock_fd = fs, home, chain, lock_fd
        self.preallocate = max(1, preallocate)
        self.segment_bytes = max(1, segment_bytes)
        self.segment_records = max(1, segment_records)
        self.seg, self.seg_prev = seg, prev
        self.fd, self.mark_fd = self._open_segment(seg)
        self.seq, self.prev, self.end = seg.first - 1, prev, 0
        self.capacity = self.written = self.synced = 0
        self.failed: BaseException | None = None
        self.closed = False
        self.mutex = threading.Lock()
        self.queue: list[Ticket] = []
        self.leader_active = False
        self.solo: SoloMode | None = None
        """Set by the store on real files: rounds may then keep the lock (see :mod:`.solo`)."""
        self.on_batch: Callable[[int], None] | None = None
        """Called by a leader with the last ``seq`` after handing over (the saga index's hook:
        it must not block, raise or fsync)."""

    def start(self, seq: int, prev: str, end: int) -> None:
        """Set the tail found by verifying the open segment."""
        self.seq, self.prev, self.end = seq, prev, end
        self.written = self.synced = end
        self.capacity = self.fs.size(self.fd)

    # -- the group commit ---------------------------------------------------------------------

    def append(self, entries: Sequence[Entry], *, sync: bool) -> list[Record]:
        """Seal and write ``entries`` as one batch (see ``FileLogStore.append``)."""
        ticket = Ticket(entries, sync)
        with self.mutex:
            self.check_usable()
            self.queue.append(ticket)
            lead = not self.leader_active
            if lead:
                self.leader_active = True
            else:
                ticket.hold()
        if not lead:
            ticket.wait()
        if not ticket.done:
            self._lead()
        if ticket.error is not None:
            raise ticket.error
        return ticket.records

    def _lead(self) -> None:
        """Write and (if asked) fsync everything queued, maybe roll, then hand over leadership."""
        with self.mutex:
            batch, self.queue = self.queue, []
        error: Exception | None = None
        interrupted: BaseException | None = None
        try:
            self.check_failed()
            solo = self.begin_round()
            try:
                if not solo:
                    self.catch_up()
                if len(batch) == 1:  # the usual round: one caller
                    lines = self._seal(batch[0])
                else:
                    lines = [line for ticket in batch for line in self._seal(ticket)]
                if lines:
                    self.write_all(lines[0] if len(lines) == 1 else b"".join(lines))
            except BaseException:
                self.end_round(solo, keep=False)
                raise
            self.end_round(solo, keep=True)
            self.written = self.end
            wants_sync = (
                any(t.sync and t.error is None for t in batch)
                if len(batch) > 1
                else (batch[0].sync and batch[0].error is None)
            )
            if wants_sync and self.synced < self.written:
                self._fsync()
            self._maybe_roll()
        except (StoreFailedError, CorruptLogError) as exc:
            error = exc
        except BaseException as exc:  # interrupted mid-batch: the file may hold part of it
            self.fail(exc)
            interrupted = exc
            error = StoreFailedError(
                f"{self.seg.path}: the writing thread was interrupted: {exc!r}"
            )
        with self.mutex:
            successor = self.queue[0] if self.queue else None
            self.leader_active = successor is not None
        for ticket in batch:
            if error is not None and ticket.error is None:
                ticket.error = error
            ticket.finish()
        if successor is not None:
            successor.wake()
        if interrupted is not None:
            raise interrupted
        if self.on_batch is not None and error is None:
            self.on_batch(self.seq)

    def begin_round(self) -> bool:
        """Take the file lock for a round; ``True`` when already held in solo mode (nobody
        else can have appended: no catching up needed)."""
        if self.solo is None:
            lock_for_writing(self.fs, self.lock_fd, self.home)
            return False
        return self.solo.begin()

    def end_round(self, solo: bool, *, keep: bool) -> None:
        """After a round: with ``keep``, the lock may be kept (solo mode); else released."""
        if self.solo is None:
            self.fs.unlock(self.lock_fd)
        elif keep:
            self.solo.end(solo)
        else:
            self.solo.release(solo)

    def _fsync(self) -> None:
        upto = self.written
        try:
            # Records land in space whose size is already durable (see write_all): the data
            # alone needs flushing, with no journal commit for the file's times.
            self.fs.datasync(self.fd)
            self.write_watermark(upto)
        except OSError as exc:  # never retried: the kernel may have dropped the dirty pages
            self.fail(exc)
            raise StoreFailedError(f"fsync of {self.seg.path} failed: {exc}") from exc
        self.synced = max(self.synced, upto)

    def _seal(self, ticket: Ticket) -> list[bytes]:
        seq, prev = self.seq, self.prev
        lines: list[bytes] = []
        try:
            for entry in ticket.entries:
                seq += 1
                record, line = self.chain.seal(entry, seq, prev)
                ticket.records.append(record)
                lines.append(line)
                prev = record.hash
        except CodecError as exc:  # this batch only: nothing of it is written
            ticket.error, ticket.records = exc, []
            return []
        self.seq, self.prev = seq, prev
        return lines

    def append_locked(self, entries: Sequence[Entry]) -> list[Record]:
        """Seal and write while already holding the file lock (used when opening)."""
        ticket = Ticket(entries, sync=False)
        lines = self._seal(ticket)
        if ticket.error is not None:
            raise ticket.error
        self.write_all(b"".join(lines))
        return ticket.records

    def write_all(self, data: bytes) -> None:
        """Write ``data`` at the log's end, inside preallocated space (holding the file lock).

        Records overwrite zero bytes that were written and fsynced beforehand, so syncing them
        does not change the file's size: the fsync flushes data only, which is cheaper than an
        append's. The space grows by ``preallocate`` bytes at a time.
        """
        try:
            if self.end + len(data) > self.capacity:
                self._grow(self.end + len(data))
            self.end += write_fully(self.fs, self.fd, data, offset=self.end)
        except OSError as exc:
            self.fail(exc)
            raise StoreFailedError(f"write to {self.seg.path} failed: {exc}") from exc

    def _grow(self, needed: int) -> None:
        size = self.fs.size(self.fd)
        target = -(-needed // self.preallocate) * self.preallocate
        if size < target:
            write_fully(self.fs, self.fd, bytes(target - size), offset=size)
            self.fs.fsync(self.fd)  # the new size is durable before records land in it
        self.capacity = max(target, size)

    def write_watermark(self, offset: int) -> None:
        """Record the synced length (not fsynced: after a power loss it can only lag)."""
        self.fs.pwrite(self.mark_fd, encode_watermark(offset), 0)

    def fail(self, exc: BaseException) -> None:
        if self.failed is None:
            self.failed = exc

    def check_failed(self) -> None:
        if self.failed is not None:
            raise StoreFailedError(
                f"{self.seg.path}: store failed ({self.failed}); reopen it to re-verify from disk"
            )

    def check_usable(self) -> None:
        if self.closed:
            raise StoreFailedError(f"{self.seg.path}: store is closed")
        self.check_failed()

    # -- other writers ------------------------------------------------------------------------

    def catch_up(self) -> None:
        """Continue the chain from the log's current end (another process may have appended,
        or sealed this segment and started the next one). Holding the file lock."""
        probe = self.fs.pread(self.fd, 1, self.end)
        if probe == b"\x00":
            return  # free space: nothing was appended, and the segment is still open
        while self.fs.exists(summary_path(self.home, self.seg.first)):
            self._follow_seal()
        size = self.fs.size(self.fd)
        self.capacity = size
        if size == self.end:
            return
        self._scan_to(size)

    def _scan_to(self, size: int) -> None:
        if size < self.end:
            raise CorruptLogError(
                self.seg.path, size, f"log shrank from {self.end} bytes while open"
            )
        tail = scan(
            self.fs, self.fd, self.chain, self.seg.path,
            start=self.end, seq=self.seq, prev=self.prev, end=size,
        )  # fmt: skip
        if tail.damage is not None:
            self.fail(tail.damage)
            raise tail.damage
        self.seq, self.prev, self.end = tail.seq, tail.hash, tail.end

    def _follow_seal(self) -> None:
        """Another process sealed the segment: verify what it added, then move to the next."""
        self._scan_to(self.fs.size(self.fd))
        summary = read_summary(self.fs, self.home, self.seg.first)
        if summary is None or (summary.last, summary.hash) != (self.seq, self.prev):
            error = CorruptLogError(
                self.seg.path, self.end, "the segment's summary does not match its records",
                self.seq,
            )  # fmt: skip
            self.fail(error)
            raise error
        self._switch(segment(self.home, self.seq + 1))

    # -- rolling ------------------------------------------------------------------------------

    def over_limit(self) -> bool:
        """Whether the open segment holds records and has reached a roll threshold."""
        count = self.seq - self.seg.first + 1
        return count > 0 and (self.end >= self.segment_bytes or count >= self.segment_records)

    def _maybe_roll(self) -> None:
        if not self.over_limit():
            return
        solo = self.begin_round()
        try:
            if not solo:
                self.catch_up()
            if self.over_limit():
                self.roll()
        except (OSError, CorruptLogError) as exc:  # the batch is written: only later ones fail
            self.fail(exc)
        finally:
            self.end_round(solo, keep=self.failed is None)

    def roll(self) -> None:
        """Seal the open segment and start the next one (holding the file lock).

        Raises:
            OSError: a write or fsync failed (the caller fails the writer).
        """
        seg = self.seg
        self.fs.fsync(self.fd)
        if self.fs.size(self.fd) > self.end:
            self.fs.truncate(self.fd, self.end)
            self.fs.fsync(self.fd)
        self.write_watermark(self.end)
        summary = Summary(seg.first, self.seq, self.seg_prev, self.prev, self.end)
        write_summary(self.fs, self.home, summary)
        self._switch(segment(self.home, self.seq + 1))

    def _open_segment(self, seg: Segment) -> tuple[int, int]:
        """Open ``seg`` and its watermark, each created durably when missing (mark first)."""
        directory = Path(seg.path).parent
        if directory != self.home:
            ensure_dir(directory, self.fs)
        mark_fd = open_durably(self.fs, directory, Path(seg.mark).name)
        try:
            fd = open_durably(self.fs, directory, Path(seg.path).name)
        except BaseException:
            self.fs.close(mark_fd)
            raise
        return fd, mark_fd

    def _switch(self, nxt: Segment) -> None:
        """Continue in segment ``nxt``: everything before it is sealed and durable."""
        fd, mark_fd = self._open_segment(nxt)
        self.release()
        self.seg, self.seg_prev, self.fd, self.mark_fd = nxt, self.prev, fd, mark_fd
        self.end = self.written = self.synced = 0
        self.capacity = self.fs.size(fd)

    def trim(self) -> None:
        """Give back the preallocated space, so a closed segment is plain JSON lines."""
        solo = self.begin_round()
        try:
            if not solo:
                self.catch_up()
            if self.fs.size(self.fd) > self.end:
                self.fs.truncate(self.fd, self.end)
                self.fs.fsync(self.fd)
        finally:
            self.end_round(solo, keep=False)

    def release(self) -> None:
        """Close the open segment's descriptors (not the lock file, which the store owns)."""
        for fd in (self.fd, self.mark_fd):
            try:
                self.fs.close(fd)
            except OSError:
                continue
