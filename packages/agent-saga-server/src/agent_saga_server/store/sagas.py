"""Reading the fleet's sagas: a filtered, paginated list, and one saga as the core tells it.

The list reads the summaries ingest keeps (``sagas``, ``saga_tools``); one saga is rebuilt from
its stored records by :func:`agent_saga.build_history`, the view ``agent-saga replay`` shows.
Pages are ordered newest first by (started, origin, saga) and continue after an opaque cursor.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from agent_saga import SagaView, build_history

from .db import Database
from .ingest import read_records


class BadCursor(ValueError):
    """A cursor this server did not hand out."""


@dataclass(frozen=True)
class SagaFilter:
    status: str | None = None
    origin: str | None = None
    tool: str | None = None
    since: int | None = None
    until: int | None = None


@dataclass(frozen=True)
class SagaSummary:
    origin: str
    saga: str
    name: str
    status: str
    started: int
    ended: int | None
    tools: list[str]


def encode_cursor(values: list[Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(values).encode()).decode().rstrip("=")


def decode_cursor(text: str, shape: tuple[type, ...]) -> list[Any]:
    """The values of a cursor, checked against their types.

    Raises:
        BadCursor: anything that is not a cursor of this shape.
    """
    try:
        padded = text + "=" * (-len(text) % 4)
        values = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
    except (ValueError, UnicodeEncodeError, binascii.Error):
        raise BadCursor("cursor is not one this server handed out") from None
    if (
        not isinstance(values, list)
        or len(values) != len(shape)
        or not all(type(v) is t for v, t in zip(values, shape, strict=True))
    ):
        raise BadCursor("cursor is not one this server handed out")
    return values


def list_sagas(
    db: Database, where: SagaFilter, limit: int, cursor: str | None
) -> tuple[list[SagaSummary], str | None]:
    """One page of sagas, newest first, and the cursor of the next page (``None``: last).

    Raises:
        BadCursor: a cursor this server did not hand out.
    """
    sql = "SELECT origin, saga, name, status, started, ended FROM sagas"
    clauses: list[str] = []
    params: list[Any] = []
    for column, value in (("status", where.status), ("origin", where.origin)):
        if value is not None:
            clauses.append(f"{column} = ?")
            params.append(value)
    if where.since is not None:
        clauses.append("started >= ?")
        params.append(where.since)
    if where.until is not None:
        clauses.append("started < ?")
        params.append(where.until)
    if where.tool is not None:
        clauses.append(
            "EXISTS (SELECT 1 FROM saga_tools t WHERE t.origin = sagas.origin "
            "AND t.saga = sagas.saga AND t.tool = ?)"
        )
        params.append(where.tool)
    if cursor is not None:
        started, origin, saga = decode_cursor(cursor, (int, str, str))
        clauses.append("(started, origin, saga) < (?, ?, ?)")
        params.extend([started, origin, saga])
    if clauses:
        sql += " WHERE " + " AND ".join(clauses)
    sql += " ORDER BY started DESC, origin DESC, saga DESC LIMIT ?"
    with db.transaction(write=False) as tx:
        rows = tx.all(sql, [*params, limit + 1])
        page = rows[:limit]
        tools: dict[tuple[str, str], list[str]] = {}
        for origin, saga, *_ in page:
            found = tx.all(
                "SELECT tool FROM saga_tools WHERE origin = ? AND saga = ? ORDER BY tool",
                (origin, saga),
            )
            tools[(origin, saga)] = [str(t[0]) for t in found]
    summaries = [
        SagaSummary(str(o), str(s), str(n), str(st), int(b), e, tools[(o, s)])
        for o, s, n, st, b, e in page
    ]
    more = None
    if len(rows) > limit:
        last = summaries[-1]
        more = encode_cursor([last.started, last.origin, last.saga])
    return summaries, more


def saga_view(db: Database, origin: str, saga: str) -> SagaView | None:
    """One saga rebuilt from its stored records (``None`` when the server has none)."""
    with db.transaction(write=False) as tx:
        records = read_records(tx, origin, saga=saga)
    if not records:
        return None
    return build_history(records).sagas[0]


def view_json(view: SagaView) -> dict[str, Any]:
    """A saga view as JSON (enums as their values)."""
    data: dict[str, Any] = json.loads(json.dumps(dataclasses.asdict(view), default=str))
    return data


__all__ = [
    "BadCursor",
    "SagaFilter",
    "SagaSummary",
    "decode_cursor",
    "encode_cursor",
    "list_sagas",
    "saga_view",
    "view_json",
]
