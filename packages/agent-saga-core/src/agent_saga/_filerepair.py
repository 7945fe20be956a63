"""Torn-tail repair of the file log: the only damage that may be cut away, and how.

A tail is torn when a crash interrupted writes that were never synced. It may be repaired only
when it lies beyond the synced watermark and no record follows it; then its bytes are kept in
``log.jsonl.broken.<n>`` (fsynced, with its directory entry) before the log is truncated and
fsynced. Anything else is refused with :class:`CorruptLogError` naming the offset.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

from ._errors import CorruptLogError
from ._fs import FileSystem
from ._homefiles import LOG_NAME, REPAIRED, write_fully
from ._logscan import looks_like_record_after
from ._records import Entry


def repair_torn_tail(
    fs: FileSystem,
    fd: int,
    home: Path,
    damage: CorruptLogError,
    end: int,
    size: int,
    watermark: int,
) -> dict[str, object]:
    """Cut the log at ``end`` if the damage there is a torn tail; returns what was done.

    Raises:
        CorruptLogError: the damage is inside the synced part, or records follow it.
    """
    where = str(home / LOG_NAME)
    if end < watermark:
        raise CorruptLogError(
            where, damage.offset,
            f"{damage.reason}, inside the synced part of the log (synced up to {watermark})",
            damage.seq,
        )  # fmt: skip
    follower = looks_like_record_after(fs, fd, end, size)
    if follower is not None:
        raise CorruptLogError(
            where, damage.offset,
            f"{damage.reason}, and records follow at offset {follower}", damage.seq,
        )  # fmt: skip
    discarded = fs.pread(fd, size - end, end).rstrip(b"\x00")
    broken = _next_broken_path(fs, home)
    broken_fd = fs.open_rw(broken)
    try:
        write_fully(fs, broken_fd, discarded, offset=0)
        fs.fsync(broken_fd)
    finally:
        fs.close(broken_fd)
    fs.fsync_dir(str(home))
    fs.truncate(fd, end)
    fs.fsync(fd)
    return {
        "offset": end,
        "discarded_bytes": len(discarded),
        "discarded_sha256": hashlib.sha256(discarded).hexdigest(),
        "broken_file": Path(broken).name,
        "reason": damage.reason,
    }


def repair_entry(repair: dict[str, object]) -> Entry:
    """The ``store.repaired`` record that states a repair in the log itself."""
    data = {k: v for k, v in repair.items() if isinstance(v, str | int)}
    return Entry(REPAIRED, None, dict(data), int(time.time() * 1000))


def _next_broken_path(fs: FileSystem, home: Path) -> str:
    n = 1
    while fs.exists(str(home / f"{LOG_NAME}.broken.{n}")):
        n += 1
    return str(home / f"{LOG_NAME}.broken.{n}")
