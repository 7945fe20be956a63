"""The file log's segments: where each one lives, and the summary that seals it.

A home's log is a sequence of segments, each a JSON-lines file holding consecutive records.
The first is ``log.jsonl`` (so a home written before segments existed is a log of one
segment), each later one is ``segments/<first seq, 20 digits>.jsonl``. Only the newest segment
is open for appending; every other one is sealed: trimmed to its last record, fsynced, and
described by ``segments/<first seq>.sealed``, a JSON summary (first and last ``seq``, the hash
before its first record and of its last one, its length in bytes) written and fsynced before
its successor is created.

Invariants:

* Segment ``k + 1`` exists only once segment ``k``'s summary is durable, so the newest segment
  with a summary and no successor is sealed with its successor not yet created (a crash in the
  middle of a roll), and a segment without a summary is the open one.
* A summary is derived data: it is checked against the segment (its length, and the chain,
  which links the next segment's first record to the summary's last hash) and rebuilt from the
  segment when missing or unreadable. It is never trusted over the records.
* Each segment has its own synced watermark (``log.synced`` for the first, else
  ``segments/<first seq>.synced``), so a roll never leaves a stale watermark in front of a
  shorter file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

from .._errors import CorruptLogError
from .files import LOG_NAME, WATERMARK_NAME, ensure_dir, open_read, write_fully
from .fs import FileSystem
from .records import GENESIS

SEGMENTS_DIR = "segments"
SUMMARY_SUFFIX = ".sealed"
SEGMENT_SUFFIX = ".jsonl"
SEGMENT_BYTES = 64 * 1024 * 1024
"""Default size after which the open segment is sealed and a new one started."""
SEGMENT_RECORDS = 1_000_000
"""Default number of records after which the open segment is sealed."""
_SUMMARY_KEYS = frozenset({"v", "first", "last", "prev", "hash", "size"})


class Segment(NamedTuple):
    """One segment of a home's log."""

    first: int
    """``seq`` of its first record."""
    path: str
    mark: str
    """Its synced watermark file."""


class Summary(NamedTuple):
    """What sealing a segment states about it (see the module docstring)."""

    first: int
    last: int
    prev: str
    """Hash of the record before its first one (:data:`GENESIS` for the first segment)."""
    hash: str
    """Hash of its last record."""
    size: int
    """Its length in bytes."""

    def encode(self) -> bytes:
        body = {"v": 1, **self._asdict()}
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode() + b"\n"


class Layout(NamedTuple):
    """A home's segments in order: the sealed ones with their summaries, then the open one.

    ``summaries[i]`` belongs to ``segments[i]``; ``None`` where it is missing or unreadable
    (only a writer repairs that). The last segment may not exist yet (``open_exists``).
    """

    segments: list[Segment]
    summaries: list[Summary | None]
    open_exists: bool

    @property
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def sealed(self) -> list[Segment]:
        return self.segments[:-1]


def segment(home: Path, first: int) -> Segment:
    """The segment of ``home`` whose first record is ``first``."""
    if first == 1:
        return Segment(1, str(home / LOG_NAME), str(home / WATERMARK_NAME))
    base = home / SEGMENTS_DIR / f"{first:020d}"
    return Segment(first, f"{base}{SEGMENT_SUFFIX}", f"{base}.synced")


def summary_path(home: Path, first: int) -> str:
    return str(home / SEGMENTS_DIR / f"{first:020d}{SUMMARY_SUFFIX}")


def segment_name(home: Path, path: str) -> str:
    """``path`` relative to ``home``, for messages."""
    try:
        return str(Path(path).relative_to(home))
    except ValueError:
        return path


def read_layout(fs: FileSystem, home: Path) -> Layout:
    """The segments of ``home``'s log, from the directory listing and the summaries.

    Reads only the summaries (a few hundred bytes each), never a segment's records.
    """
    names = fs.listdir(str(home / SEGMENTS_DIR))
    sealed = {_first(n, SUMMARY_SUFFIX) for n in names}
    found = {_first(n, SEGMENT_SUFFIX) for n in names} | sealed
    firsts = sorted({1, *(f for f in found if f is not None)})
    segments = [segment(home, first) for first in firsts]
    summaries = [read_summary(fs, home, first) if first in sealed else None for first in firsts]
    last = summaries[-1]
    open_exists = True
    if last is not None and last.last >= firsts[-1]:  # the newest segment is sealed
        segments.append(segment(home, last.last + 1))
        summaries.append(None)
        open_exists = False
    return Layout(segments, summaries, open_exists)


def _first(name: str, suffix: str) -> int | None:
    if not name.endswith(suffix):
        return None
    stem = name[: -len(suffix)]
    return int(stem) if len(stem) == 20 and stem.isdigit() and int(stem) >= 1 else None


def read_summary(fs: FileSystem, home: Path, first: int) -> Summary | None:
    """The summary of segment ``first``; ``None`` when missing, torn or malformed."""
    path = summary_path(home, first)
    if not fs.exists(path):
        return None
    try:
        fd = open_read(fs, path)
    except OSError:
        return None
    try:
        raw = fs.pread(fd, 4096, 0)
    finally:
        fs.close(fd)
    return parse_summary(raw, first)


def parse_summary(raw: bytes, first: int) -> Summary | None:
    try:
        obj = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(obj, dict) or obj.keys() != _SUMMARY_KEYS or obj["v"] != 1:
        return None
    ints = (obj["first"], obj["last"], obj["size"])
    if any(type(v) is not int for v in ints) or obj["first"] != first:
        return None
    if not all(isinstance(obj[k], str) and len(obj[k]) == 64 for k in ("prev", "hash")):
        return None
    if obj["last"] < first or obj["size"] <= 0:
        return None
    return Summary(obj["first"], obj["last"], obj["prev"], obj["hash"], obj["size"])


def write_summary(fs: FileSystem, home: Path, summary: Summary) -> None:
    """Write segment ``summary.first``'s summary and make it durable (file and entry)."""
    ensure_dir(home / SEGMENTS_DIR, fs)
    path = summary_path(home, summary.first)
    fd = fs.open_rw(path)
    try:
        fs.truncate(fd, 0)
        write_fully(fs, fd, summary.encode(), offset=0)
        fs.fsync(fd)
    finally:
        fs.close(fd)
    fs.fsync_dir(str(home / SEGMENTS_DIR))


def check_sealed(
    seg: Segment, summary: Summary, size: int, seq: int, prev: str
) -> CorruptLogError | None:
    """Why ``summary`` does not describe sealed segment ``seg`` of ``size`` bytes that follows
    record ``seq`` with hash ``prev``; ``None`` when it does. Reads no record."""
    where = seg.path
    if seg.first != seq + 1:
        return CorruptLogError(
            where, 0, f"the segment starts at seq {seg.first} but the log before it ends at "
            f"seq {seq}: records are missing", seq + 1,
        )  # fmt: skip
    if summary.prev != prev:
        return CorruptLogError(
            where, 0, "the segment does not continue the chain of the one before it", seg.first
        )
    if size != summary.size:
        return CorruptLogError(
            where, min(size, summary.size),
            f"sealed segment is {size} bytes but was sealed at {summary.size}",
        )  # fmt: skip
    return None


def chain_start(layout: Layout) -> tuple[int, str]:
    """``(seq, hash)`` of the record before the open segment, from the summaries."""
    summaries = [s for s in layout.summaries[:-1] if s is not None]
    if not summaries:
        return 0, GENESIS
    last = summaries[-1]
    return last.last, last.hash
