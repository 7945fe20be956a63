"""Reading a log file without writing to it: records and verification, from any process.

Nothing here creates, repairs or locks for long: a reader takes the shared lock on ``log.lock``
only while it finds where the content ends.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import NamedTuple

from .._errors import ConfigurationError, CorruptLogError
from .archive import ArchiveReader, configured_target, read_marker
from .chain import Chain
from .files import LOCK_NAME, LOG_NAME, OS, WATERMARK_NAME, decode_watermark, open_read
from .fs import FileSystem
from .ledger import RedactionLedger
from .records import GENESIS, Record
from .scan import content_end, scan, walk
from .segments import Layout, Segment, Summary, check_sealed, read_layout
from .solo import reading_lock
from .store import VerifyReport


def _batch_boundary(home: Path, mark: str, fd: int, fs: FileSystem) -> tuple[int, int]:
    """Where the open segment's content ends, and its synced watermark, read while no writer is
    mid-batch.

    Writers hold ``log.lock`` exclusively for a whole batch (and for a roll), so the end found
    under a shared lock (or, beside this process's own solo writer, under its round lock:
    :func:`.solo.reading_lock`) is a record boundary, and the bytes before it never change
    afterwards (writers only fill the preallocated zeros after it). The lock is held only while
    the zeros at the end of the file are skipped. The watermark is read first: it only grows,
    and only ever to a length already written, so an intact log never ends before the
    watermark read with it.
    """
    lock_path = home / LOCK_NAME
    if fs is not OS or not lock_path.exists():
        watermark = _watermark(mark, fs)
        return content_end(fs, fd, fs.size(fd)), watermark
    with reading_lock(home):  # log.lock shared, or this process's solo writer's round lock
        watermark = _watermark(mark, fs)
        return content_end(fs, fd, fs.size(fd)), watermark


def synced_watermark(path: Path, fs: FileSystem = OS) -> int:
    """The synced length recorded beside the log at ``path`` (0 when absent or unreadable)."""
    return _watermark(str(path.parent / WATERMARK_NAME), fs)


def _watermark(mark: str, fs: FileSystem) -> int:
    if not fs.exists(mark):
        return 0
    try:
        fd = open_read(fs, mark)
    except OSError:
        return 0
    try:
        return decode_watermark(fs.pread(fd, 64, 0))
    finally:
        fs.close(fd)


def layout_of(path: Path, fs: FileSystem = OS) -> Layout:
    """The segments of the log whose first segment is ``path`` (``<home>/log.jsonl``); a file
    under another name is a log of one segment."""
    if path.name == LOG_NAME:
        return read_layout(fs, path.parent)
    return Layout([Segment(1, str(path), str(path.parent / WATERMARK_NAME))], [None], True)


class _Part(NamedTuple):
    """One segment opened for reading: where its content ends, and its synced watermark."""

    segment: Segment
    summary: Summary | None
    fd: int
    end: int
    synced: int
    active: bool
    fs: FileSystem
    """What reads ``fd``: the log's file system, or the archive for an archived segment."""


def _parts(path: Path, fs: FileSystem, layout: Layout) -> Iterator[_Part]:
    """Each segment that exists, opened in order (closed when the next one is asked for).

    Raises:
        CorruptLogError: a sealed segment is missing.
    """
    home = path.parent
    archive = ArchiveReader()
    for seg, summary in zip(layout.segments, layout.summaries, strict=True):
        active = seg is layout.active
        if not fs.exists(seg.path):
            if active:
                return
            archived = open_archived(fs, home, seg, archive)
            if archived is None:
                raise CorruptLogError(seg.path, 0, "sealed segment is missing", seg.first)
            where, reader, fd = archived
            try:
                yield _Part(
                    seg._replace(path=where), summary, fd, reader.size(fd), 0, False, reader
                )
            finally:
                reader.close(fd)
            continue
        fd = open_read(fs, seg.path)
        try:
            if active:
                end, synced = _batch_boundary(home, seg.mark, fd, fs)
            else:
                end, synced = fs.size(fd), 0
            yield _Part(seg, summary, fd, end, synced, active, fs)
        finally:
            fs.close(fd)


def open_archived(
    fs: FileSystem, home: Path, seg: Segment, archive: ArchiveReader
) -> tuple[str, FileSystem, int] | None:
    """``(its location, reader, descriptor)`` for a sealed segment moved to the archive;
    ``None`` when it was not archived.

    Raises:
        CorruptLogError: it was archived but the copy cannot be read.
    """
    marker = read_marker(fs, home, seg.first)
    if marker is None:
        return None
    try:
        reader, fd = archive.open(marker.url, configured_target(home))
    except (OSError, ConfigurationError) as exc:
        reason = f"archived segment cannot be read: {exc}"
        raise CorruptLogError(marker.url, 0, reason, seg.first) from exc
    return marker.url, reader, fd


def _sealed_problem(
    part: _Part, seq: int, prev: str, start: tuple[int, str]
) -> CorruptLogError | None:
    """Why a sealed segment that follows ``start`` (seq, hash), read up to ``(seq, prev)``,
    does not match its summary."""
    summary = part.summary
    if part.active or summary is None:
        return None
    problem = check_sealed(part.segment, summary, part.end, *start)
    if problem is None and (seq, prev) != (summary.last, summary.hash):
        problem = CorruptLogError(
            part.segment.path, part.end,
            f"sealed segment ends at seq {seq} with hash {prev[:12]}..., its summary says seq "
            f"{summary.last} with hash {summary.hash[:12]}...", seq,
        )  # fmt: skip
    return problem


def _unjustified(ledger: RedactionLedger, layout: Layout) -> CorruptLogError | None:
    found = ledger.first_unjustified()
    if found is None:
        return None
    bad_seq, offset, why = found
    where = [s.path for s in layout.segments if s.first <= bad_seq][-1]
    return CorruptLogError(where, offset, why, bad_seq)


def iter_log(
    path: Path, chain: Chain | None = None, fs: FileSystem = OS, *, watermark: bool = False
) -> Generator[tuple[int, Record]]:
    """``(offset, record)`` for each record of the log at ``path``, verified while read.

    ``offset`` counts bytes from the start of the first segment, across segments. Read-only:
    creates nothing, repairs nothing, takes no lock a writer waits on for long. Memory stays
    bounded by the maximum record size whatever the log holds. With ``watermark``, a log whose
    open segment ends before its synced watermark fails after its last record, as opening a
    store on it does.

    Raises:
        CorruptLogError: at the first record that is incomplete, malformed or off the chain, a
            sealed segment that is missing or does not match its summary, or (with
            ``watermark``) a log shorter than the synced length.
    """
    layout = layout_of(path, fs)
    chain = chain or Chain()
    ledger = RedactionLedger()
    seq, prev, base = 0, GENESIS, 0
    for part in _parts(path, fs, layout):
        last_end, start = 0, (seq, prev)
        where = part.segment.path
        for offset, length, record in walk(
            part.fs, part.fd, chain, where, seq=seq, prev=prev, end=part.end, ledger=ledger
        ):
            last_end, seq, prev = offset + length, record.seq, record.hash
            yield base + offset, record
        problem = _sealed_problem(part, seq, prev, start)
        if problem is not None:
            raise problem
        if watermark and part.active and last_end < part.synced:
            raise CorruptLogError(
                where, last_end,
                f"log ends at {last_end} bytes but {part.synced} bytes were synced: records "
                "were removed", seq + 1,
            )  # fmt: skip
        base += part.end
    problem = _unjustified(ledger, layout)
    if problem is not None:
        raise problem


def follow_log(
    path: Path, chain: Chain, fs: FileSystem, start: int, seq: int, prev: str
) -> Iterator[tuple[int, Record]]:
    """``(next offset, record)`` for each record after record ``seq`` (hash ``prev``), which
    ends at offset ``start`` (counted across segments, as :func:`iter_log` does): how a reader
    keeps up with a growing log without re-reading it. Sealed segments before ``start`` are
    skipped unread.

    Raises:
        CorruptLogError: a record after ``start`` is incomplete, malformed or off the chain
            (including a log rewritten so that record ``seq + 1`` no longer follows ``prev``).
    """
    base = 0
    for part in _parts(path, fs, layout_of(path, fs)):
        if not part.active and start >= base + part.end:
            base += part.end
            continue
        local = max(0, start - base)
        for offset, length, record in walk(
            part.fs, part.fd, chain, part.segment.path, start=local, seq=seq, prev=prev,
            end=part.end,
        ):  # fmt: skip
            seq, prev = record.seq, record.hash
            yield base + offset + length, record
        base += part.end


def read_log(path: str | os.PathLike[str], *, key: bytes | None = None) -> Iterator[Record]:
    """The verified records of a log file, read-only (see :func:`iter_log`).

    ``path`` is the log file or the agent-saga home holding ``log.jsonl``.
    """
    target = Path(path)
    if target.is_dir():
        target = target / LOG_NAME
    return (record for _, record in iter_log(target, Chain(key)))


def verify_file(path: Path, chain: Chain | None = None, fs: FileSystem = OS) -> VerifyReport:
    """Verify the log whose first segment is ``path``, every segment from its first byte;
    never raises on bad content. A sealed segment must match its summary."""
    if not fs.exists(str(path)):
        return VerifyReport(True, 0, None, GENESIS)
    layout = layout_of(path, fs)
    chain = chain or Chain()
    ledger = RedactionLedger()
    count, seq, prev = 0, 0, GENESIS
    try:
        for part in _parts(path, fs, layout):
            start = (seq, prev)
            tail = scan(
                part.fs, part.fd, chain, part.segment.path,
                seq=seq, prev=prev, end=part.end, ledger=ledger,
            )  # fmt: skip
            count += tail.records
            if tail.damage is not None:
                return VerifyReport(False, count, tail.damage, tail.hash)
            seq, prev = tail.seq, tail.hash
            problem = _sealed_problem(part, seq, prev, start)
            if problem is not None:
                return VerifyReport(False, count, problem, prev)
    except CorruptLogError as exc:
        return VerifyReport(False, count, exc, prev)
    except OSError as exc:
        error = CorruptLogError(str(path), 0, f"unreadable: {exc}")
        return VerifyReport(False, count, error, prev)
    problem = _unjustified(ledger, layout)
    return VerifyReport(problem is None, count, problem, prev)


def walk_segments(
    path: Path, chain: Chain, fs: FileSystem, *, first: int, offset: int, seq: int, prev: str
) -> Generator[tuple[int, int, int, Record]]:
    """``(segment's first seq, offset in it, length, record)`` for each record after record
    ``seq`` (hash ``prev``), which ends at byte ``offset`` of the segment starting at seq
    ``first``; earlier segments are skipped unread, later ones followed. Verified while read.

    Raises:
        CorruptLogError: a record after that point is incomplete, malformed or off the chain
            (so a stale starting point, one the log no longer continues, is found at once).
    """
    ledger = RedactionLedger()  # shared: masked values are verify's to account for, not ours
    for part in parts_from(path, fs, first):
        start = offset if part.segment.first == first else 0
        for position, length, record in walk(
            part.fs, part.fd, chain, part.segment.path,
            start=start, seq=seq, prev=prev, end=part.end, ledger=ledger,
        ):  # fmt: skip
            seq, prev = record.seq, record.hash
            yield part.segment.first, position, length, record


def parts_from(path: Path, fs: FileSystem, first: int) -> Iterator[_Part]:
    """The segments from the one starting at ``seq`` ``first`` on, each opened in turn (see
    :func:`_parts`); earlier segments are skipped unread (nor fetched from an archive)."""
    layout = layout_of(path, fs)
    skip = sum(1 for seg in layout.sealed if seg.first < first)
    layout = layout._replace(segments=layout.segments[skip:], summaries=layout.summaries[skip:])
    for part in _parts(path, fs, layout):
        if part.segment.first >= first:
            yield part


def shorter_than_synced(path: Path, fs: FileSystem = OS) -> bool:
    """Whether the open segment of the log at ``path`` ends before its synced watermark
    (records were removed from its end). Reads only the segment's last bytes."""
    seg = layout_of(path, fs).active
    if not fs.exists(seg.path):
        return False
    fd = open_read(fs, seg.path)
    try:
        end, synced = _batch_boundary(path.parent, seg.mark, fd, fs)
    finally:
        fs.close(fd)
    return end < synced
