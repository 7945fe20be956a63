"""Walking the log for the saga index: the chain verified from the stored bytes, and of each
record only what the index keeps, read from the fields after its ``data``.

A record's framing, ``seq``, ``prev`` link and hash are checked as the fast verify checks them
(:func:`.chain.check_line_fast`: no JSON decoding of ``data`` once a process has checked
:data:`.lineforms.WARM_AFTER` committed lines); its ``kind``, ``saga`` and
``ts`` are read from the canonical fields that follow ``data``, which that check has just
matched. ``data`` is decoded only for the two kinds whose data the index keeps (a
``saga.end``'s status, the saga a ``saga.settled`` settles), so indexing costs a hash and a
few string operations per record. Whether ``data`` is canonical JSON, and masked values, are
left to the reads that answer from the index (:meth:`.sagaindex.SagaIndex.saga_records`
parses every record it returns in full) and to ``verify``.
"""

from __future__ import annotations

import re
from collections.abc import Generator
from json import loads
from pathlib import Path
from typing import Any, NamedTuple

from .._errors import CorruptLogError
from .chain import MAX_RECORD_BYTES
from .codec import CodecError, decode
from .fs import FileSystem
from .read import parts_from
from .records import Kind
from .scan import CHUNK, all_zero

_STRING = rb'"[^"\\\x00-\x1f]*(?:\\.[^"\\\x00-\x1f]*)*"'
_FIELDS = re.compile(
    rb',"hash":"([0-9a-f]{64})","kind":(' + _STRING + rb'),"prev":"([0-9a-f]{64})",'
    rb'"saga":(null|' + _STRING + rb')(?:,"salts":"[A-Za-z0-9_.-]*")?,'
    rb'"seq":(0|[1-9][0-9]{0,18}),"ts":(-?(?:0|[1-9][0-9]{0,18})),"v":[12]\}'
)
_HASH_FIELD = b',"hash":"'
_DECODED = frozenset({Kind.SAGA_END, Kind.SETTLED})


class IndexedRecord(NamedTuple):
    """What the index keeps of one record, and where it lies (segment's first ``seq``, byte
    offset, length with its newline). ``data`` is the record's data for a ``saga.end`` or a
    ``saga.settled`` and empty for any other kind; ``prev`` and ``hash`` are hex."""

    seg: int
    off: int
    length: int
    seq: int
    ts: int
    kind: str
    saga: str | None
    data: dict[str, Any]
    prev: str
    hash: str


def walk_for_index(
    path: Path, fs: FileSystem, *, first: int, offset: int, seq: int, prev: str
) -> Generator[IndexedRecord]:
    """Each record after record ``seq`` (hash ``prev``), which ends at byte ``offset`` of the
    segment starting at ``seq`` ``first``, up to the log's last complete batch; earlier
    segments are skipped unread.

    Raises:
        CorruptLogError: a record after that point is incomplete, not in a record's canonical
            framing, or does not follow the one before it (``seq`` and ``prev``).
    """
    last = prev.encode("ascii")
    for part in parts_from(path, fs, first):
        where, position = part.segment.path, offset if part.segment.first == first else 0
        pending, read_to = b"", position
        while read_to < part.end:
            chunk = part.fs.pread(part.fd, min(CHUNK, part.end - read_to), read_to)
            if not chunk:
                break
            read_to += len(chunk)
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            for line in lines:
                if line[:1] == b"\x00" and all_zero(part.fs, part.fd, position, part.end):
                    return
                record = line_fields(line, seq + 1, last, part.segment.first, position)
                if isinstance(record, str):
                    raise CorruptLogError(where, position, record, seq + 1)
                yield record
                seq, last, position = seq + 1, record.hash.encode(), position + len(line) + 1
            if len(pending) > MAX_RECORD_BYTES:
                raise CorruptLogError(where, position, "record longer than the limit", seq + 1)
        free = pending[:1] == b"\x00" and all_zero(part.fs, part.fd, position, part.end)
        if pending and not free:
            raise CorruptLogError(where, position, "incomplete final record (no newline)", seq + 1)


def line_fields(
    line: bytes, seq: int, prev: bytes, seg: int = 0, off: int = 0
) -> IndexedRecord | str:
    """What the index keeps of the record stored as ``line`` (no newline; at byte ``off`` of
    segment ``seg``), expected as record ``seq`` after the hash ``prev`` (ASCII hex); or why it
    is not that record. Its hash is not recomputed (see the module docstring)."""
    if len(line) >= MAX_RECORD_BYTES:
        return f"record longer than {MAX_RECORD_BYTES} bytes"
    cut = line.rfind(_HASH_FIELD)  # the top-level field: inside strings quotes are escaped
    found = _FIELDS.fullmatch(line, cut) if cut >= 9 and line.startswith(b'{"data":{') else None
    if found is None:
        return "not a record in canonical form"
    digest, kind_json, stated_prev, saga_json, stated_seq, ts = found.groups()
    if int(stated_seq) != seq:
        return f"seq {int(stated_seq)} where {seq} was expected"
    if stated_prev != prev:
        return f"prev does not match the hash of record {seq - 1}"
    kind = _string(kind_json)
    data: dict[str, Any] = {}
    if kind in _DECODED:
        try:
            decoded = decode(line).get("data")
        except (CodecError, AttributeError) as exc:
            return f"not a record: {exc}"
        data = decoded if isinstance(decoded, dict) else {}
    saga = None if saga_json == b"null" else _string(saga_json)
    return IndexedRecord(
        seg, off, len(line) + 1, seq, int(ts), kind, saga, data, prev.decode(), digest.decode()
    )


def kind_and_saga(line: bytes) -> tuple[str, str | None] | None:
    """The ``kind`` and ``saga`` of a stored record whose line a verify has accepted (read
    from its canonical fields after ``data``, nothing decoded but them); ``None`` when the
    line does not end in those fields.

    The fields are found at their fixed offsets after the last ``"hash"`` (a hash and a
    ``prev`` are 64 hex digits), each separator checked; a line where any does not hold, or
    whose kind or saga holds an escape, is read with the full pattern instead."""
    cut = line.rfind(_HASH_FIELD)
    if cut < 0:
        return None
    start = cut + 83
    end = line.find(b'"', start)
    saga = end + 83
    if (
        end > 0
        and line.startswith(b'","kind":"', cut + 73)
        and line.startswith(b'","prev":"', end)
        and line.startswith(b'","saga":', end + 74)
        and line.find(b"\\", start) < 0
    ):
        kind = line[start:end].decode("utf-8")
        if line.startswith(b"null,", saga):
            return kind, None
        close = line.find(b'"', saga + 1)
        if line.startswith(b'"', saga) and close > 0:
            return kind, line[saga + 1 : close].decode("utf-8")
    found = _FIELDS.fullmatch(line, cut)
    if found is None:
        return None
    saga_json = found.group(4)
    return _string(found.group(2)), None if saga_json == b"null" else _string(saga_json)


def _string(quoted: bytes) -> str:
    """A JSON string's value (escapes are rare in kinds and saga ids: decoded only then)."""
    if b"\\" in quoted:
        value = loads(quoted)
        return value if isinstance(value, str) else ""
    return quoted[1:-1].decode("utf-8")
