"""The live log: new records of every origin, pushed to the browser over Server-Sent Events.

The stream follows the tail of the stored log. Each round it reads the ``origins`` table (one
row per origin, its last ``seq``) and, for an origin that moved, only the records after the
position it had sent (``WHERE origin = ? AND seq > ?``, the primary key's order); it never
re-reads a log. A round that finds nothing waits on the process's one
:class:`~.tail_watch.TailWatch`, which polls the tails every 0.1 s for all streams at once and
wakes them when one moved, so a record stored by ingest reaches the page well within a second
and idle streams cost nothing per stream.

Each event's id is the stream's whole position, ``origin=seq`` pairs joined by ``;``. A browser
that reconnects sends it back as ``Last-Event-ID`` and the stream resumes right after the last
record it delivered, for every origin (origins that appeared since are sent from their first
record). Without one the stream starts at the tail: only records stored from then on. The
position grows with the number of origins (about 20 bytes each); a ``Last-Event-ID`` over
:data:`MAX_POSITION` characters, or one that does not parse, starts at the tail.

A stream lives only as long as the session that opened it: each round first reads the
session again, and a logged-out or expired session's stream ends.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from ..store.db import Database
from ..store.tokens import NAME
from .sessions import Viewer
from .tail_watch import TailWatch
from .web import Config, PageViewer, api_viewer, current_viewer, page_headers, render

pages = APIRouter()
WAIT = 1.0
"""The longest a stream waits for the tails to move before it looks whether its browser left."""
BATCH = 200
KEEPALIVE = 15.0
MAX_POSITION = 16 * 1024
_PAIR = re.compile(rf"({NAME.pattern})=(0|[1-9][0-9]{{0,18}})")


def parse_position(text: str | None) -> dict[str, int] | None:
    """The position a ``Last-Event-ID`` names, or ``None`` (absent, too long or malformed)."""
    if not text or len(text) > MAX_POSITION:
        return None
    position: dict[str, int] = {}
    for pair in text.split(";"):
        found = _PAIR.fullmatch(pair)
        if found is None:
            return None
        position[found.group(1)] = int(found.group(2))
    return position


def format_position(position: dict[str, int]) -> str:
    return ";".join(f"{origin}={seq}" for origin, seq in sorted(position.items()))


def tails(db: Database) -> dict[str, int]:
    """Every origin's last stored ``seq``."""
    with db.transaction(write=False) as tx:
        return {str(o): int(s) for o, s in tx.all("SELECT origin, last_seq FROM origins")}


def records_after(db: Database, origin: str, seq: int, limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` records of ``origin`` after ``seq``, in order, as the page shows them."""
    with db.transaction(write=False) as tx:
        rows = tx.all(
            "SELECT seq, ts, kind, saga, data FROM records WHERE origin = ? AND seq > ? "
            "ORDER BY seq LIMIT ?",
            (origin, seq, limit),
        )
    out = []
    for s, ts, kind, saga, data in rows:
        fields = json.loads(data)
        tool = fields.get("tool") if isinstance(fields, dict) else None
        out.append(
            {"origin": origin, "seq": int(s), "ts": int(ts), "kind": str(kind),
             "saga": saga, "tool": tool if isinstance(tool, str) else None}
        )  # fmt: skip
    return out


def next_events(db: Database, position: dict[str, int]) -> list[dict[str, Any]]:
    """The records stored after ``position`` (at most :data:`BATCH` per origin), advancing it."""
    found: list[dict[str, Any]] = []
    for origin, last in tails(db).items():
        sent = position.setdefault(origin, 0)
        if last > sent:
            batch = records_after(db, origin, sent, BATCH)
            if batch:
                position[origin] = batch[-1]["seq"]
                found.extend(batch)
    return found


def record_messages(db: Database, events: list[dict[str, Any]], start: dict[str, int]) -> list[str]:
    """One ``record`` event per record, each with the position right after it as its id."""
    position = dict(start)
    out = []
    for event in events:
        position[event["origin"]] = event["seq"]
        out.append(f"id: {format_position(position)}\nevent: record\ndata: {json.dumps(event)}\n\n")
    return out


Messages = Callable[[Database, list[dict[str, Any]], dict[str, int]], list[str]]
"""What a stream sends for a batch of new records: ``(db, records, position before them)``."""


async def follow(
    request: Request,
    db: Database,
    position: dict[str, int],
    messages: Messages = record_messages,
    signed_in: Callable[[], bool] = lambda: True,
) -> AsyncIterator[str]:
    """The SSE stream from ``position`` on, until the browser goes away or ``signed_in``
    (asked before each read of new records: at least every :data:`WAIT` seconds) answers no,
    so a session that logged out or expired is sent nothing more; each batch of new records
    becomes the events ``messages`` makes of it."""
    yield "retry: 1000\n\n"
    watch = tail_watch(request, db)
    quiet = time.monotonic()
    while not await request.is_disconnected():
        if not await run_in_threadpool(signed_in):
            return
        version = watch.version  # before the read: a record stored after it wakes the wait
        before = dict(position)
        events = await run_in_threadpool(next_events, db, position)
        if events:
            for text in await run_in_threadpool(messages, db, events, before):
                yield text
            quiet = time.monotonic()
            continue
        await watch.wait(version, WAIT)
        if time.monotonic() - quiet >= KEEPALIVE:
            quiet = time.monotonic()
            yield ": keep-alive\n\n"


def tail_watch(request: Request, db: Database) -> TailWatch:
    """The process's one :class:`TailWatch` of ``db`` (kept in the app's state)."""
    state = request.app.state
    found: TailWatch | None = getattr(state, "tail_watch", None)
    if found is None or found.db is not db:
        found = TailWatch(db, tails)
        state.tail_watch = found
    return found


def stream(request: Request, db: Database, messages: Messages = record_messages) -> Response:
    """An event stream (``text/event-stream``) following the log from the request's
    ``Last-Event-ID`` (else from the tail), for as long as the request's session is valid."""
    position = parse_position(request.headers.get("last-event-id")) or tails(db)
    headers = {**page_headers(), "x-accel-buffering": "no"}

    def signed_in() -> bool:
        return current_viewer(request) is not None

    events = follow(request, db, position, messages, signed_in)
    return StreamingResponse(events, media_type="text/event-stream", headers=headers)


@pages.get("/live")
def live_page(viewer: PageViewer) -> Response:
    return render("live.html", viewer)


@pages.get("/live/stream")
def live_stream(
    request: Request, config: Config, _: Annotated[Viewer, Depends(api_viewer)]
) -> Response:
    """The live log's event stream, resumable by ``Last-Event-ID``."""
    return stream(request, config.db)


__all__ = [
    "Messages",
    "follow",
    "format_position",
    "next_events",
    "pages",
    "parse_position",
    "record_messages",
    "stream",
    "tails",
]
