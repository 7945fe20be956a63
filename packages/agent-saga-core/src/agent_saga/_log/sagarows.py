"""What the saga index keeps of a record: which saga it is read with, and each saga's line
(first and last ``seq``, when it began, how many records, the status its latest ``saga.end``
states)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from .indexwalk import IndexedRecord
from .records import IN_SAGA, Kind, Record

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS records (
    seq INTEGER PRIMARY KEY, saga TEXT NOT NULL, own INTEGER NOT NULL,
    seg INTEGER NOT NULL, off INTEGER NOT NULL, len INTEGER NOT NULL, prev BLOB NOT NULL,
    hash BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS records_by_saga ON records (saga, seq);
CREATE TABLE IF NOT EXISTS sagas (
    id TEXT PRIMARY KEY, key TEXT NOT NULL, first_seq INTEGER NOT NULL,
    last_seq INTEGER NOT NULL, started INTEGER NOT NULL, n INTEGER NOT NULL,
    end_status TEXT, began INTEGER, ended INTEGER);
CREATE INDEX IF NOT EXISTS sagas_by_age ON sagas (first_seq);
CREATE INDEX IF NOT EXISTS sagas_by_key ON sagas (key);
CREATE INDEX IF NOT EXISTS sagas_unfinished ON sagas (first_seq) WHERE end_status IS NULL;
CREATE INDEX IF NOT EXISTS sagas_by_end ON sagas (ended) WHERE ended IS NOT NULL;
"""
"""The index's tables (SQLite)."""

Row = tuple[int, str, int, int, int, int, bytes, bytes]
"""A row of the index's ``records`` table: seq, saga, own, segment, offset, length, the hash
before it and its hash."""


class Indexed(Protocol):
    """What the index reads of a record (a :class:`Record` or an
    :class:`~.indexwalk.IndexedRecord`)."""

    @property
    def seq(self) -> int: ...
    @property
    def ts(self) -> int: ...
    @property
    def kind(self) -> str: ...
    @property
    def saga(self) -> str | None: ...
    @property
    def data(self) -> dict[str, Any]: ...


def check_places(saga_id: str, own: list[Record]) -> str | None:
    """Why a saga's own records (in log order) are not all of them: one that states its place
    in the saga (:data:`IN_SAGA`) stands elsewhere, so one before it is missing or one is
    there twice; ``None`` when each stands where it says (records of older versions state no
    place and are not checked)."""
    for place, record in enumerate(own):
        stated = record.data.get(IN_SAGA)
        if stated is not None and stated != place:
            return (
                f"record {record.seq} of saga {saga_id} is its record {stated} but is read as "
                f"its record {place}: the records read are not all of the saga's"
            )
    return None


SAGA_LINE = (
    "SELECT key, first_seq, last_seq, started, n, end_status, began, ended FROM sagas WHERE id = ?"
)
"""A saga's line in the index, as :func:`check_line` compares it."""


def check_line(saga_id: str, stated: tuple[object, ...], records: list[Record]) -> str | None:
    """Why the index's line of a saga (:data:`SAGA_LINE`) is not what its records (read and
    verified) make of it, or ``None``: every column is derived again by :func:`fold`, so a
    line edited to move a saga in a listing (its age, its status) is caught when it is read."""
    sagas: dict[str, list[object]] = {}
    for record in records:
        if record.saga == saga_id:
            fold(sagas, record)
    line = sagas.get(saga_id)
    derived = None if line is None else (id_key(saga_id), *line)
    if tuple(stated) != derived:
        return f"the index's line of saga {saga_id} is not what its records make of it"
    return None


PREFIX_END = "\U0010ffff"
"""Appended to a prefix, the bound after every string that starts with it (UTF-8 order, as
SQLite compares text)."""
TYPED_ROWS = "SELECT 1 FROM records WHERE own = 1 AND saga >= ? AND saga < ? AND saga != ? LIMIT 1"
"""A row of a saga (not the third argument) whose id starts with a prefix as typed."""
KEYED_ROWS = (
    "SELECT 1 FROM records WHERE own = 1 AND saga != ? AND "
    "substr(replace(lower(saga), '-', ''), 1, length(?)) = ? LIMIT 1"
)
"""A row of a saga (not the first argument) whose :func:`id_key` starts with a key (SQLite's
``lower`` folds ASCII only): a scan of the table."""


def id_key(saga_id: str) -> str:
    """A saga id as prefixes are matched: no dashes, lower case."""
    return saga_id.replace("-", "").lower()


def belongs_to(record: Indexed) -> tuple[str | None, int]:
    """The saga a record is read with, and whether it is the saga's own (1) or settles it."""
    if record.saga is not None:
        return record.saga, 1
    return settles(record), 0


def settles(record: Indexed) -> str | None:
    if record.saga is None and record.kind == Kind.SETTLED:
        target = record.data.get("saga")
        return target if isinstance(target, str) else None
    return None


def fold(sagas: dict[str, list[object]], record: Indexed) -> None:
    """Add ``record`` to its saga's line: first seq, last seq, started, count, end status, and
    the ``seq`` of its first ``saga.begin`` and of its first ``saga.end`` (none yet: ``None``;
    the first ``seq`` and the first ``saga.end`` are what :mod:`.unfinishedset` needs to tell
    which sagas were unfinished at a past point)."""
    assert record.saga is not None
    end: str | None = None
    if record.kind == Kind.SAGA_END:
        status = record.data.get("status")
        end = status if isinstance(status, str) else "?"
    began = record.seq if record.kind == Kind.SAGA_BEGIN else None
    line = sagas.get(record.saga)
    if line is None:
        ended = None if end is None else record.seq
        sagas[record.saga] = [record.seq, record.seq, record.ts, 1, end, began, ended]
        return
    line[1] = record.seq
    line[3] = int(str(line[3])) + 1
    if end is not None:
        line[4] = end
        if line[6] is None:
            line[6] = record.seq
    if line[5] is None:
        line[5] = began


def chunk_rows(
    records: Iterator[IndexedRecord], limit: int
) -> tuple[list[Row], dict[str, list[object]], IndexedRecord | None, int]:
    """The rows of up to ``limit`` of ``records``, their sagas' lines (see :func:`fold`), the
    last record taken and how many were taken."""
    rows: list[Row] = []
    sagas: dict[str, list[object]] = {}
    last, added = None, 0
    for record in records:
        target, own = belongs_to(record)
        if target is not None:
            rows.append(
                (record.seq, target, own, record.seg, record.off, record.length,
                 bytes.fromhex(record.prev), bytes.fromhex(record.hash))
            )  # fmt: skip
        if own:
            fold(sagas, record)
        last, added = record, added + 1
        if added >= limit:
            break
    return rows, sagas, last, added


def newest_query(
    before: int | None, since: int | None, ended: bool | None, end_status: str | None
) -> tuple[str, list[object]]:
    """The SQL (and its arguments, ``LIMIT ?`` last to add) of :meth:`SagaIndex.newest`."""
    where: list[str] = ["1"]
    args: list[object] = []
    if before is not None:
        where.append("first_seq < ?")
        args.append(before)
    if since is not None:
        where.append("started >= ?")
        args.append(since)
    if ended is not None:
        where.append("end_status IS NOT NULL" if ended else "end_status IS NULL")
    if end_status is not None:
        where.append("end_status = ?")
        args.append(end_status)
    sql = (
        f"SELECT id, first_seq FROM sagas WHERE {' AND '.join(where)} "  # noqa: S608
        "ORDER BY first_seq DESC LIMIT ?"
    )
    return sql, args


UNFINISHED_NOW = "SELECT id FROM sagas WHERE end_status IS NULL ORDER BY first_seq"
UNFINISHED_AT = (
    "SELECT id FROM sagas WHERE end_status IS NULL AND first_seq <= ? "
    "UNION ALL SELECT id FROM sagas WHERE ended > ? AND first_seq <= ?"
)
"""The sagas unfinished after record ``?`` (given three times): with a record of their own by
then, not ended (:mod:`.unfinishedset`)."""
ANCHOR = (
    "SELECT seq, seg, off, len, prev, hash FROM records WHERE seq <= ? ORDER BY seq DESC LIMIT 1"
)
"""The last indexed record at or before ``?``: where a walk of what follows it starts."""
