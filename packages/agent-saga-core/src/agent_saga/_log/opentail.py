"""Verifying the open segment when a store opens: its last stretch, not all of it.

Invariant (what opening a store checks, whatever the log's age): the sealed segments against
their summaries (:mod:`.opening`), and the open segment from the first record boundary at or
after ``OPEN_CHECK_BYTES`` before its synced watermark to its end. The first record of that
stretch is checked as a record (its hash over its bytes, with the chain key, at the ``seq``
and after the hash it states) and every later one against the chain, so the record the writer
continues from, the synced records before it and any tail after the watermark are verified; a
torn tail is repaired and other damage refused exactly as a full check does, because any
damage found in the stretch sends opening back to the full check of the segment
(:func:`.repair.scan_on_open`). What lies before the stretch was verified when it was written
and is checked by ``verify`` and by every full read; opening does not re-read it. A segment
no longer than the stretch (or with no watermark) is checked in full, as before.
"""

from __future__ import annotations

import json

from .chain import Chain, ChainBreak, parse_line
from .files import decode_watermark
from .fs import FileSystem
from .repair import scan_on_open
from .scan import Tail, scan

OPEN_CHECK_BYTES = 64 * 1024
"""Bytes before the synced watermark that opening verifies again (a constant: O(1) in age)."""
_PROBE = 64 * 1024


def scan_tail_on_open(
    fs: FileSystem,
    fd: int,
    mark_fd: int,
    chain: Chain,
    path: str,
    *,
    seq: int,
    prev: str,
    check_bytes: int = OPEN_CHECK_BYTES,
) -> tuple[Tail, dict[str, object] | None]:
    """What :func:`.repair.scan_on_open` returns, reading only the segment's last stretch
    when it is intact (see the module docstring).

    Raises:
        CorruptLogError: as :func:`.repair.scan_on_open`.
    """
    watermark = decode_watermark(fs.pread(mark_fd, 64, 0))
    start = _stretch_start(fs, fd, chain, watermark, check_bytes, seq)
    if start is not None:
        offset, before_seq, before_hash = start
        tail = scan(fs, fd, chain, path, start=offset, seq=before_seq, prev=before_hash)
        if tail.damage is None and tail.end >= watermark:
            return tail, None
    return scan_on_open(fs, fd, mark_fd, chain, path, seq=seq, prev=prev)


def _stretch_start(
    fs: FileSystem, fd: int, chain: Chain, watermark: int, check_bytes: int, seq: int
) -> tuple[int, int, str] | None:
    """``(offset, seq before, hash before)`` of the first record at or after ``check_bytes``
    before ``watermark``, checked as a record; ``None`` when the whole segment is to be checked
    (it is short, or no such record is found intact)."""
    probe = watermark - check_bytes
    if probe <= 0 or fs.size(fd) < watermark:
        return None
    window = fs.pread(fd, min(_PROBE, watermark - probe), probe - 1)
    newline = window.find(b"\n")
    if newline < 0:
        return None
    offset = probe + newline
    end = fs.pread(fd, min(_PROBE, watermark - offset), offset)
    cut = end.find(b"\n")
    if cut <= 0:
        return None
    line = end[:cut]
    try:
        stated = json.loads(line)
        stated_seq, stated_prev = stated["seq"], stated["prev"]
    except (ValueError, KeyError, TypeError):
        return None
    if type(stated_seq) is not int or not isinstance(stated_prev, str) or stated_seq <= seq:
        return None
    if isinstance(parse_line(chain, line, stated_seq, stated_prev, allow_masked=True), ChainBreak):
        return None
    return offset, stated_seq - 1, stated_prev
