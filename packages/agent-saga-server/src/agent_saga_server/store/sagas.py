"""Reading the fleet's sagas: a filtered, paginated list, and one saga as the core tells it.

The list reads the summaries ingest keeps (``sagas``, ``saga_tools``); one saga is rebuilt from
its stored records by :func:`agent_saga.build_history`, the view ``agent-saga replay`` shows.
Pages are ordered newest first by (started, origin, saga) and continue after a cursor naming
that position (``started~origin~saga``).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from agent_saga import Kind, SagaView, build_history

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


CURSOR_PATTERN = r"^(0|[1-9][0-9]{0,15})~[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}~.{1,500}$"
"""A page's cursor: ``started~origin~saga`` of the last saga of the previous page."""


def encode_cursor(started: int, origin: str, saga: str) -> str:
    return f"{started}~{origin}~{saga}"


def decode_cursor(text: str) -> tuple[int, str, str]:
    """The position a cursor names.

    Raises:
        BadCursor: text that is not ``started~origin~saga``.
    """
    started, _, rest = text.partition("~")
    origin, _, saga = rest.partition("~")
    if not (started.isdigit() and origin and saga):
        raise BadCursor("a cursor reads started~origin~saga")
    return int(started), origin, saga


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
        started, origin, saga = decode_cursor(cursor)
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
        more = encode_cursor(last.started, last.origin, last.saga)
    return summaries, more


def saga_view(db: Database, origin: str, saga: str) -> SagaView | None:
    """One saga rebuilt from its stored records (``None`` when the server has none), with the
    origin's ``saga.settled`` records that name it (who took on a ``needs_human`` saga)."""
    with db.transaction(write=False) as tx:
        records = read_records(tx, origin, saga=saga)
        if not records:
            return None
        settled = [
            r for r in read_records(tx, origin, kind=Kind.SETTLED) if r.data.get("saga") == saga
        ]
    merged = sorted([*records, *settled], key=lambda r: r.seq)
    return build_history(merged).sagas[0]


def view_json(view: SagaView) -> dict[str, Any]:
    """A saga view as JSON (enums as their values)."""
    data: dict[str, Any] = json.loads(json.dumps(dataclasses.asdict(view), default=str))
    return data


__all__ = [
    "CURSOR_PATTERN",
    "BadCursor",
    "SagaFilter",
    "SagaSummary",
    "decode_cursor",
    "encode_cursor",
    "list_sagas",
    "saga_view",
    "view_json",
]
