"""Where the saga index stands in the log, and the error of an index that does not describe it."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from .._errors import CorruptLogError
from .archive import ArchiveReader
from .chain import MAX_RECORD_BYTES, Chain, Masked, parse_line
from .files import OS, open_read
from .fs import FileSystem
from .read import open_archived
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
INDEX_DIR = "index"
INDEX_NAME = "sagas.sqlite3"


def discard_index(home: Path) -> None:
    """Delete the index of ``home`` and its journal; the next reader rebuilds it. For what
    rewrites the log's bytes in place (a redaction): the index's places would be stale."""
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{home / INDEX_DIR / INDEX_NAME}{suffix}")


VERSION = "2"
"""The index's format; an index of another version is rebuilt from the start."""


def read_point(db: sqlite3.Connection) -> Point:
    """The point an index states in its ``meta`` table; :data:`START` for an index of another
    version, or one whose point does not parse (it is then rebuilt from the start)."""
    rows = dict(db.execute("SELECT k, v FROM meta").fetchall())
    if rows.get("version") != VERSION or "point" not in rows:
        return START
    try:
        seg, start, end, seq, prev, digest = str(rows["point"]).split()
        return Point(int(seg), int(start), int(end), int(seq), prev, digest)
    except ValueError:
        return START


def save_point(db: sqlite3.Connection, point: Point) -> None:
    db.execute("INSERT OR REPLACE INTO meta VALUES ('point', ?)", (" ".join(map(str, point)),))


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
    :data:`RUN_BYTES` a read, each read's records verified before the next read (so a forged
    index costs one read, never the bytes of all its rows). A place that is not a pair of
    integers within its segment's bytes is a mismatch before anything is read.

    Raises:
        IndexMismatch: the bytes at a place are not its record (or hold masked values).
        OSError: a segment cannot be read.
    """
    found: dict[int, Record] = {}
    by_segment: dict[int, list[int]] = {}
    for index, place in enumerate(places):
        if not all(type(value) is int for value in place[:4]) or type(place.prev) is not str:
            raise IndexMismatch(f"the index's place of record {place.seq!r} is not well formed")
        if place.off < 0 or not 0 < place.length <= MAX_RECORD_BYTES + 1 or place.seg < 1:
            raise IndexMismatch(f"no record of {place.length} bytes at offset {place.off}")
        by_segment.setdefault(place.seg, []).append(index)
    for seg, indexes in by_segment.items():
        indexes.sort(key=lambda index: places[index].off)
        path, fs, fd = _open_segment(home, seg)
        try:
            size = fs.size(fd)
            for index in indexes:
                if places[index].off + places[index].length > size:
                    raise IndexMismatch(
                        f"no record of {places[index].length} bytes at offset "
                        f"{places[index].off} of {path}"
                    )
            for run in _runs(places, indexes):
                start = places[run[0]].off
                data = fs.pread(
                    fd, max(places[i].off + places[i].length for i in run) - start, start
                )
                for index in run:
                    place = places[index]
                    line = data[place.off - start : place.off - start + place.length]
                    found[index] = _verified(chain, place, line, path)
        finally:
            fs.close(fd)
    return [found[index] for index in range(len(places))]


def _open_segment(home: Path, first: int) -> tuple[str, FileSystem, int]:
    """``(where, reader, descriptor)`` of the segment of ``home`` starting at ``seq``
    ``first``: its file, or its copy in the archive once it was moved there (its marker says
    where; the records read from it are verified as any are).

    Raises:
        OSError: neither the file nor an archived copy can be read.
    """
    seg = segment(home, first)
    try:
        return seg.path, OS, open_read(OS, seg.path)
    except FileNotFoundError:
        try:
            archived = open_archived(OS, home, seg, ArchiveReader())
        except CorruptLogError as exc:  # archived, but the copy cannot be read
            raise OSError(str(exc)) from exc
        if archived is None:
            raise
    return archived


def _runs(places: Sequence[Place], indexes: list[int]) -> Iterator[list[int]]:
    """``indexes`` (sorted by offset) in runs read together: neighbours at most :data:`GAP`
    bytes apart, at most :data:`RUN_BYTES` from a run's first byte to its last."""
    run = indexes[:1]
    for index in indexes[1:]:
        last, end = places[run[-1]], places[index].off + places[index].length
        if (
            places[index].off - (last.off + last.length) > GAP
            or end - places[run[0]].off > RUN_BYTES
        ):
            yield run
            run = []
        run.append(index)
    if run:
        yield run


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
