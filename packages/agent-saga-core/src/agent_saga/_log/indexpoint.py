"""Where the saga index stands in the log, and the error of an index that does not describe it."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from .chain import Chain, Masked, parse_line
from .files import OS, open_read
from .records import GENESIS, Record
from .segments import segment


class IndexMismatch(Exception):
    """The index does not describe the log (a record read through it does not verify)."""


class Point(NamedTuple):
    """How far the index covers the log: the last indexed record, where it lies (segment,
    start and end offsets) and the hashes before and of it."""

    seg: int
    start: int
    end: int
    seq: int
    prev: str
    hash: str


START = Point(1, 0, 0, 0, GENESIS, GENESIS)


def read_at(
    home: Path, chain: Chain, seg: int, off: int, length: int, seq: int, prev: str
) -> Record:
    """Record ``seq`` (after the hash ``prev``), read and verified from the ``length`` bytes at
    offset ``off`` of the segment of ``home`` starting at ``seq`` ``seg``.

    Raises:
        IndexMismatch: those bytes are not that record (or hold masked values).
        OSError: the segment cannot be read.
    """
    path = segment(home, seg).path
    fd = open_read(OS, path)
    try:
        line = OS.pread(fd, length, off)
    finally:
        OS.close(fd)
    if len(line) != length or not line.endswith(b"\n"):
        raise IndexMismatch(f"no record of {length} bytes at offset {off} of {path}")
    # A record with masked values is valid only with the signed redaction that accounts for
    # it, which a full read checks: it is never answered from here.
    result = parse_line(chain, line[:-1], seq, prev, allow_masked=True)
    if isinstance(result, Masked) or not isinstance(result, Record):
        raise IndexMismatch(f"the record at offset {off} of {path} is not record {seq}")
    return result
