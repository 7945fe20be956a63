"""One saga's records, and the unfinished sagas, read through the fleet schema's indexes.

The writer stores each record's ``saga`` and ``kind`` beside its line; ``open_sagas`` lists
the sagas begun and not ended (kept by a trigger, see :mod:`.schema`). A read through them
touches the saga's rows only (index ``(saga, seq)``), never the whole table, and trusts none of
it: each row's line must be a well-formed record whose own hash and ``hash`` column agree and
whose ``saga`` is the one asked for, and each record that states its place in the saga must
stand there (a row kept out of the ``saga`` column mid-saga is caught), else the read fails
naming the row.

Rows written by an earlier version have no ``kind``: before the first such read they are
filled in from their lines, a page at a time, found through the partial index of rows without
a ``kind`` (once; a table with none costs one index probe), and ``open_sagas`` is rebuilt.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._errors import CorruptLogError
from .._log.chain import Chain, ChainBreak, parse_line
from .._log.records import IN_SAGA, Record
from .._log.sagarows import check_places
from .read import _prev_field

if TYPE_CHECKING:
    from psycopg.sql import Composed

Query = Callable[[Any, tuple[object, ...]], Sequence[tuple[Any, ...]]]
PAGE = 1000
_REBUILD = (
    "DELETE FROM {s}.open_sagas;"
    " INSERT INTO {s}.open_sagas (saga, seq) SELECT b.saga, min(b.seq) FROM {s}.records b"
    " WHERE b.kind = 'saga.begin' AND b.saga IS NOT NULL AND NOT EXISTS (SELECT 1 FROM"
    " {s}.records e WHERE e.saga = b.saga AND e.kind = 'saga.end') GROUP BY b.saga"
)


def saga_rows(
    query: Query, q: Mapping[str, Composed], chain: Chain, where: str, saga_id: str
) -> list[Record]:
    """The records of ``saga_id`` in ``seq`` order, each checked (see the module docstring).

    Raises:
        CorruptLogError: a row is not a record of its own hash, or not of this saga.
    """
    records = []
    for seq, digest, line in query(q["saga"], (saga_id,)):
        raw = bytes(line)
        result = parse_line(chain, raw, int(seq), _prev_field(raw))
        if isinstance(result, ChainBreak):
            raise CorruptLogError(where, int(seq) - 1, result.reason, seq=int(seq))
        if result.hash != str(digest) or result.saga != saga_id:
            reason = (
                "hash column does not match the record"
                if result.hash != str(digest)
                else ("saga column does not match the record")
            )
            raise CorruptLogError(where, int(seq) - 1, reason, seq=int(seq))
        records.append(result)
    if check_places(saga_id, records) is not None:  # a row kept out of the saga column
        place, moved = next(
            (place, r)
            for place, r in enumerate(records)
            if r.data.get(IN_SAGA) not in (None, place)
        )
        reason = (
            f"record {moved.seq} is saga {saga_id}'s record {moved.data[IN_SAGA]} but the saga "
            f"column gives it as its record {place}: a record of the saga is not marked as one"
        )
        raise CorruptLogError(where, moved.seq - 1, reason, seq=moved.seq)
    return records


def matching_saga_ids(
    query: Query, q: Mapping[str, Composed], text: str
) -> tuple[list[str], int | None]:
    """The saga ids ``text`` may name: itself when the column holds it (one probe of the
    ``(saga, seq)`` index), else the ids whose key (lower case, no dashes) starts with its key,
    oldest first, at most :data:`PAGE` of them (a pass over the ``saga`` column, no line is
    read); with how many sagas the log holds when none matches (``None`` otherwise)."""
    if query(q["saga_probe"], (text,)):
        return [text], None
    key = text.replace("-", "").lower()
    pattern = key.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    ids = [str(row[0]) for row in query(q["saga_prefix"], (pattern, PAGE))]
    if ids:
        return ids, None
    return [], int(query(q["saga_count"], ())[0][0])


def open_saga_ids(query: Query, q: Mapping[str, Composed]) -> list[str]:
    """Ids of the sagas begun and not ended, oldest first (a hint: the caller reads each)."""
    return [str(row[0]) for row in query(q["open_sagas"], ())]


def fill_unindexed(
    execute: Callable[[Composed, tuple[object, ...]], Sequence[tuple[Any, ...]]],
    q: Mapping[str, Composed],
    schema: str,
) -> int:
    """Fill ``saga`` and ``kind`` of rows written without them; rebuild ``open_sagas`` when
    any was. Returns how many rows were filled (0: one index probe, nothing written)."""
    from psycopg import sql

    filled = 0
    ident = sql.Identifier(schema)
    update = sql.SQL("UPDATE {s}.records SET saga = %s, kind = %s WHERE seq = %s").format(s=ident)
    while True:
        rows = execute(q["unindexed"], (PAGE,))
        for seq, line in rows:
            raw = bytes(line)
            saga, kind = _fields(raw)
            execute(update, (saga, kind, int(seq)))
        filled += len(rows)
        if len(rows) < PAGE:
            break
    if filled:
        for statement in _REBUILD.split(";"):
            execute(sql.SQL(statement.strip()).format(s=ident), ())
    return filled


def _fields(line: bytes) -> tuple[str | None, str]:
    """``(saga, kind)`` of a stored line, decoded (a line that does not decode gets the kind
    ``?``: it is never a saga's, and reading the log reports it)."""
    import json

    try:
        obj = json.loads(line)
        saga, kind = obj.get("saga"), obj.get("kind")
    except (ValueError, AttributeError, RecursionError):
        return None, "?"
    return (saga if isinstance(saga, str) else None), (kind if isinstance(kind, str) else "?")
