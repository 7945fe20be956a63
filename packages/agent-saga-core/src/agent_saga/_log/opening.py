"""Opening a home's log for writing: the sealed segments checked from their summaries.

Opening reads each sealed segment's summary and size, never its records, so it costs the same
whatever the log's age; the records of the open segment alone are verified (by the store, with
the torn-tail repair of :mod:`.repair`). A summary that is missing or unreadable is rebuilt
from its segment's records, which are verified while read: summaries are never trusted over
the records, and a sealed segment that does not match its summary fails closed.
"""

from __future__ import annotations

from pathlib import Path

from .._errors import CorruptLogError
from .archive import read_marker
from .chain import Chain
from .files import open_read
from .fs import FileSystem
from .records import GENESIS
from .scan import scan
from .segments import Layout, Segment, Summary, check_sealed, read_layout, write_summary


def open_layout(fs: FileSystem, home: Path, chain: Chain) -> tuple[Layout, int, str]:
    """The home's segments, and ``(seq, hash)`` of the record before the open segment.

    Raises:
        CorruptLogError: a sealed segment is missing, does not match its summary or does not
            continue the chain of the one before it, or the open segment does not follow them.
    """
    layout = read_layout(fs, home)
    seq, prev = 0, GENESIS
    for seg, stated in zip(layout.sealed, layout.summaries, strict=False):
        summary = stated
        if not fs.exists(seg.path):
            marker = read_marker(fs, home, seg.first)  # moved to the archive: size from there
            if marker is None or summary is None:
                raise CorruptLogError(seg.path, 0, "sealed segment is missing", seg.first)
            problem = check_sealed(seg, summary, marker.size, seq, prev)
            if problem is not None:
                raise problem
            seq, prev = summary.last, summary.hash
            continue
        fd = open_read(fs, seg.path)
        try:
            size = fs.size(fd)
            if summary is None:
                summary = rebuild_summary(fs, fd, chain, seg, seq, prev, size)
                write_summary(fs, home, summary)
        finally:
            fs.close(fd)
        problem = check_sealed(seg, summary, size, seq, prev)
        if problem is not None:
            raise problem
        seq, prev = summary.last, summary.hash
    if layout.active.first != seq + 1:
        raise CorruptLogError(
            layout.active.path, 0,
            f"the open segment starts at seq {layout.active.first}, after seq {seq}", seq + 1,
        )  # fmt: skip
    return layout, seq, prev


def rebuild_summary(
    fs: FileSystem, fd: int, chain: Chain, seg: Segment, seq: int, prev: str, size: int
) -> Summary:
    """The summary of sealed segment ``seg`` (``size`` bytes, after record ``seq`` with hash
    ``prev``), from its records, verified while read.

    Raises:
        CorruptLogError: the segment is damaged, empty, or has bytes after its last record.
    """
    tail = scan(fs, fd, chain, seg.path, seq=seq, prev=prev, end=size)
    if tail.damage is not None:
        raise tail.damage
    if tail.records == 0 or tail.end != size:
        raise CorruptLogError(seg.path, tail.end, "sealed segment has no records or a tail")
    return Summary(seg.first, tail.seq, prev, tail.hash, size)
