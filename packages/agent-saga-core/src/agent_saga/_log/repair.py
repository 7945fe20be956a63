"""Torn-tail repair of the file log: the only damage that may be cut away, and how.

A tail is torn when a crash interrupted writes that were never synced. It may be repaired only
when it lies beyond the synced watermark and no record follows it, in the open segment; then
its bytes are kept in ``<segment>.broken.<n>`` (``log.jsonl.broken.<n>`` for the first
segment; fsynced, with its directory entry) before the segment is truncated and fsynced.
Anything else is refused with :class:`CorruptLogError` naming the offset.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

from .._errors import CorruptLogError
from .chain import Chain
from .files import REPAIRED, decode_watermark, write_fully
from .fs import FileSystem
from .records import Entry
from .scan import Tail, looks_like_record_after, scan


def scan_on_open(
    fs: FileSystem, fd: int, mark_fd: int, chain: Chain, path: str, *, seq: int, prev: str
) -> tuple[Tail, dict[str, object] | None]:
    """Verify the open segment when a store opens the log; repair a torn tail, refuse other
    damage. The segment's first record follows record ``seq`` with hash ``prev``.

    Returns the verified tail (where appending continues) and the repair made, if any.

    Raises:
        CorruptLogError: damage that is not a torn tail, or a segment shorter than its synced
            watermark (records were removed).
    """
    tail = scan(fs, fd, chain, path, seq=seq, prev=prev)
    watermark = decode_watermark(fs.pread(mark_fd, 64, 0))
    if tail.damage is None and tail.end < watermark:
        raise CorruptLogError(
            path, tail.end,
            f"log ends at {tail.end} bytes but {watermark} bytes were synced: records "
            "were removed",
        )  # fmt: skip
    if tail.damage is None:
        return tail, None
    return tail, repair_torn_tail(fs, fd, path, tail.damage, tail.end, tail.size, watermark)


def repair_torn_tail(
    fs: FileSystem,
    fd: int,
    where: str,
    damage: CorruptLogError,
    end: int,
    size: int,
    watermark: int,
) -> dict[str, object]:
    """Cut the log at ``end`` if the damage there is a torn tail; returns what was done.

    Raises:
        CorruptLogError: the damage is inside the synced part, or records follow it.
    """
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
    broken = _next_broken_path(fs, where)
    broken_fd = fs.open_rw(broken)
    try:
        write_fully(fs, broken_fd, discarded, offset=0)
        fs.fsync(broken_fd)
    finally:
        fs.close(broken_fd)
    fs.fsync_dir(str(Path(where).parent))
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


def _next_broken_path(fs: FileSystem, where: str) -> str:
    n = 1
    while fs.exists(f"{where}.broken.{n}"):
        n += 1
    return f"{where}.broken.{n}"
