"""Where the saga index stands in the log, and the error of an index that does not describe it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from .chain import MAX_RECORD_BYTES, Chain, Masked, parse_line
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
    (record,) = read_places(home, chain, [Place(seq, seg, off, length, prev)])
    return record


class Place(NamedTuple):
    """Where the index says record ``seq`` lies: ``length`` bytes at ``off`` of the segment
    starting at ``seg``, after the record whose hash is ``prev``."""

    seq: int
    seg: int
    off: int
    length: int
    prev: str


GAP = 1 << 14
"""Records of one segment at most this many bytes apart are read in one ``pread`` (with what
lies between them): a saga's records are usually near one another."""
RUN_BYTES = 1 << 20
"""The most bytes one ``pread`` of several records spans (a single record may exceed it)."""


def read_places(home: Path, chain: Chain, places: Sequence[Place]) -> list[Record]:
    """The records at ``places``, in their order, each read and verified as :func:`read_at`
    reads one: each segment is opened once and neighbouring records are read together, at most
    :data:`RUN_BYTES` a read. A place that is not a pair of integers within its segment's bytes
    (a forged or damaged index) is a mismatch before anything is read.

    Raises:
        IndexMismatch: the bytes at a place are not its record (or hold masked values).
        OSError: a segment cannot be read.
    """
    lines: dict[int, bytes] = {}
    paths: dict[int, str] = {}
    by_segment: dict[int, list[int]] = {}
    for index, place in enumerate(places):
        if not all(type(value) is int for value in place[:4]) or type(place.prev) is not str:
            raise IndexMismatch(f"the index's place of record {place.seq!r} is not well formed")
        if place.off < 0 or not 0 < place.length <= MAX_RECORD_BYTES + 1 or place.seg < 1:
            raise IndexMismatch(f"no record of {place.length} bytes at offset {place.off}")
        by_segment.setdefault(place.seg, []).append(index)
    for seg, indexes in by_segment.items():
        indexes.sort(key=lambda index: places[index].off)
        paths[seg] = segment(home, seg).path
        fd = open_read(OS, paths[seg])
        try:
            size = OS.size(fd)
            for index in indexes:
                if places[index].off + places[index].length > size:
                    raise IndexMismatch(
                        f"no record of {places[index].length} bytes at offset "
                        f"{places[index].off} of {paths[seg]}"
                    )
            run = indexes[:1]
            for index in indexes[1:]:
                last, end = places[run[-1]], places[index].off + places[index].length
                if (
                    places[index].off - (last.off + last.length) > GAP
                    or end - places[run[0]].off > RUN_BYTES
                ):
                    lines.update(_read_run(fd, places, run))
                    run = []
                run.append(index)
            lines.update(_read_run(fd, places, run))
        finally:
            OS.close(fd)
    return [
        _verified(chain, place, lines[index], paths[place.seg])
        for index, place in enumerate(places)
    ]


def _read_run(fd: int, places: Sequence[Place], run: list[int]) -> dict[int, bytes]:
    """The bytes of each place of ``run`` (sorted by offset), read in one ``pread``."""
    start = places[run[0]].off
    end = max(places[index].off + places[index].length for index in run)
    data = OS.pread(fd, end - start, start)
    return {
        index: data[places[index].off - start : places[index].off - start + places[index].length]
        for index in run
    }


def _verified(chain: Chain, place: Place, line: bytes, path: str) -> Record:
    seq, _, off, length, prev = place
    if len(line) != length or not line.endswith(b"\n"):
        raise IndexMismatch(f"no record of {length} bytes at offset {off} of {path}")
    # A record with masked values is valid only with the signed redaction that accounts for
    # it, which a full read checks: it is never answered from here.
    result = parse_line(chain, line[:-1], seq, prev, allow_masked=True)
    if isinstance(result, Masked) or not isinstance(result, Record):
        raise IndexMismatch(f"the record at offset {off} of {path} is not record {seq}")
    return result
