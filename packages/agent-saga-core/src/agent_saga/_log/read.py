"""Reading a log file without writing to it: records and verification, from any process.

Nothing here creates, repairs or locks for long: a reader takes the shared lock on ``log.lock``
only while it finds where the content ends.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Generator, Iterator
from pathlib import Path

from .._errors import CorruptLogError
from .chain import Chain
from .files import LOCK_NAME, LOG_NAME, OS, WATERMARK_NAME, decode_watermark
from .fs import FileSystem
from .records import GENESIS, Record
from .scan import content_end, scan, walk
from .store import VerifyReport


def _batch_boundary(path: Path, fd: int, fs: FileSystem) -> tuple[int, int]:
    """Where the log's content ends, and the synced watermark, read while no writer is mid-batch.

    Writers hold ``log.lock`` exclusively for a whole batch, so the end found under a shared
    lock is a record boundary, and the bytes before it never change afterwards (writers only
    fill the preallocated zeros after it). The lock is held only while the zeros at the end of
    the file are skipped. The watermark is read first: it only grows, and only ever to a length
    already written, so an intact log never ends before the watermark read with it.
    """
    lock_path = path.parent / LOCK_NAME
    if fs is not OS or not lock_path.exists():
        watermark = synced_watermark(path, fs)
        return content_end(fs, fd, fs.size(fd)), watermark
    lock_fd = os.open(lock_path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_SH)
        watermark = synced_watermark(path, fs)
        return content_end(fs, fd, fs.size(fd)), watermark
    finally:
        os.close(lock_fd)


def synced_watermark(path: Path, fs: FileSystem = OS) -> int:
    """The synced length recorded beside the log at ``path`` (0 when absent or unreadable)."""
    mark = path.parent / WATERMARK_NAME
    if not fs.exists(str(mark)):
        return 0
    try:
        fd = os.open(mark, os.O_RDONLY | os.O_CLOEXEC) if fs is OS else fs.open_rw(str(mark))
    except OSError:
        return 0
    try:
        return decode_watermark(fs.pread(fd, 64, 0))
    finally:
        fs.close(fd)


def _open_for_reading(path: Path, fs: FileSystem) -> int:
    return os.open(path, os.O_RDONLY | os.O_CLOEXEC) if fs is OS else fs.open_rw(str(path))


def iter_log(
    path: Path, chain: Chain | None = None, fs: FileSystem = OS, *, watermark: bool = False
) -> Generator[tuple[int, Record]]:
    """``(offset, record)`` for each record of the log at ``path``, verified while read.

    Read-only: creates nothing, repairs nothing, takes no lock a writer waits on for long.
    Memory stays bounded by the maximum record size whatever the file holds. With
    ``watermark``, a log that ends before its synced watermark (``log.synced``) fails after its
    last record, as opening a store on it does.

    Raises:
        CorruptLogError: at the first record that is incomplete, malformed or off the chain, or
            (with ``watermark``) at the end of a log shorter than the synced length.
    """
    if not fs.exists(str(path)):
        return
    fd = _open_for_reading(path, fs)
    try:
        end, synced = _batch_boundary(path, fd, fs)
        last_end, seq = 0, 0
        for offset, length, record in walk(fs, fd, chain or Chain(), str(path), end=end):
            last_end, seq = offset + length, record.seq
            yield offset, record
        if watermark and last_end < synced:
            raise CorruptLogError(
                str(path), last_end,
                f"log ends at {last_end} bytes but {synced} bytes were synced: records were "
                "removed", seq + 1,
            )  # fmt: skip
    finally:
        fs.close(fd)


def follow_log(
    path: Path, chain: Chain, fs: FileSystem, start: int, seq: int, prev: str
) -> Iterator[tuple[int, Record]]:
    """``(next offset, record)`` for each record after record ``seq`` (hash ``prev``), which
    ends at byte ``start``: how a reader keeps up with a growing log without re-reading it.

    Raises:
        CorruptLogError: a record after ``start`` is incomplete, malformed or off the chain
            (including a log rewritten so that record ``seq + 1`` no longer follows ``prev``).
    """
    if not fs.exists(str(path)):
        return
    fd = _open_for_reading(path, fs)
    try:
        end, _ = _batch_boundary(path, fd, fs)
        for offset, length, record in walk(
            fs, fd, chain, str(path), start=start, seq=seq, prev=prev, end=end
        ):
            yield offset + length, record
    finally:
        fs.close(fd)


def read_log(path: str | os.PathLike[str], *, key: bytes | None = None) -> Iterator[Record]:
    """The verified records of a log file, read-only (see :func:`iter_log`).

    ``path`` is the log file or the agent-saga home holding ``log.jsonl``.
    """
    target = Path(path)
    if target.is_dir():
        target = target / LOG_NAME
    return (record for _, record in iter_log(target, Chain(key)))


def verify_file(path: Path, chain: Chain | None = None, fs: FileSystem = OS) -> VerifyReport:
    """Verify the log file at ``path`` from its first byte; never raises on bad content."""
    if not fs.exists(str(path)):
        return VerifyReport(True, 0, None, GENESIS)
    try:
        fd = _open_for_reading(path, fs)
    except OSError as exc:
        return VerifyReport(False, 0, CorruptLogError(str(path), 0, f"unreadable: {exc}"), GENESIS)
    try:
        end, _ = _batch_boundary(path, fd, fs)
        tail = scan(fs, fd, chain or Chain(), str(path), end=end)
    except OSError as exc:
        error = CorruptLogError(str(path), 0, f"unreadable: {exc}")
        return VerifyReport(False, 0, error, GENESIS)
    finally:
        fs.close(fd)
    return VerifyReport(tail.damage is None, tail.records, tail.damage, tail.hash)
