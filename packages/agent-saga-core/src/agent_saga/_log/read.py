"""Reading a log file without writing to it: records and verification, from any process.

Nothing here creates, repairs or locks for long: a reader takes the shared lock on ``log.lock``
only while it finds where the content ends.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from .._errors import CorruptLogError
from .chain import Chain
from .files import LOCK_NAME, LOG_NAME, OS
from .fs import FileSystem
from .records import GENESIS, Record
from .scan import content_end, scan, walk
from .store import VerifyReport


def _batch_boundary(path: Path, fd: int, fs: FileSystem) -> int:
    """Where the log's content ends, read while no writer is mid-batch.

    Writers hold ``log.lock`` exclusively for a whole batch, so the end found under a shared
    lock is a record boundary, and the bytes before it never change afterwards (writers only
    fill the preallocated zeros after it). The lock is held only while the zeros at the end of
    the file are skipped.
    """
    lock_path = path.parent / LOCK_NAME
    if fs is not OS or not lock_path.exists():
        return content_end(fs, fd, fs.size(fd))
    lock_fd = os.open(lock_path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_SH)
        return content_end(fs, fd, fs.size(fd))
    finally:
        os.close(lock_fd)


def _open_for_reading(path: Path, fs: FileSystem) -> int:
    return os.open(path, os.O_RDONLY | os.O_CLOEXEC) if fs is OS else fs.open_rw(str(path))


def iter_log(
    path: Path, chain: Chain | None = None, fs: FileSystem = OS
) -> Iterator[tuple[int, Record]]:
    """``(offset, record)`` for each record of the log at ``path``, verified while read.

    Read-only: creates nothing, repairs nothing, takes no lock a writer waits on for long.
    Memory stays bounded by the maximum record size whatever the file holds.

    Raises:
        CorruptLogError: at the first record that is incomplete, malformed or off the chain.
    """
    if not fs.exists(str(path)):
        return
    fd = _open_for_reading(path, fs)
    try:
        end = _batch_boundary(path, fd, fs)
        for offset, _, record in walk(fs, fd, chain or Chain(), str(path), end=end):
            yield offset, record
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
        end = _batch_boundary(path, fd, fs)
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
        tail = scan(fs, fd, chain or Chain(), str(path), end=_batch_boundary(path, fd, fs))
    except OSError as exc:
        error = CorruptLogError(str(path), 0, f"unreadable: {exc}")
        return VerifyReport(False, 0, error, GENESIS)
    finally:
        fs.close(fd)
    return VerifyReport(tail.damage is None, tail.records, tail.damage, tail.hash)
