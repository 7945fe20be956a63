"""Live updates of the sagas list: a saga that starts, or whose status or tools change, is sent
to the open sagas page over Server-Sent Events, which updates its row or adds it on top.

The stream is the live log's (:func:`.live.follow`: the log's tail followed, resumable with
``Last-Event-ID``); each batch of new records becomes one ``saga`` event per saga they touch,
carrying that saga's row as the list shows it (read once from the ``sagas`` summary table, by
its primary key). Every event's id is the position after the whole batch.
"""

from __future__ import annotations

import json
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from ..store.db import Database
from .live import format_position, stream
from .sagas import when
from .sessions import Viewer
from .web import PREFIX, Config, api_viewer

pages = APIRouter()


def saga_rows(db: Database, keys: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """The list's rows of the sagas ``keys`` names ((origin, saga) pairs), in that order."""
    out = []
    with db.transaction(write=False) as tx:
        for origin, saga in keys:
            found = tx.one(
                "SELECT name, status, started FROM sagas WHERE origin = ? AND saga = ?",
                (origin, saga),
            )
            if found is None:
                continue
            tools = [str(t) for (t,) in tx.all(
                "SELECT tool FROM saga_tools WHERE origin = ? AND saga = ? ORDER BY tool",
                (origin, saga),
            )]  # fmt: skip
            name, status, started = found
            out.append(
                {"origin": origin, "saga": saga, "name": str(name), "status": str(status),
                 "started": when(int(started)), "tools": tools,
                 "href": f"{PREFIX}/sagas/{_quoted(origin)}/{_quoted(saga)}"}
            )  # fmt: skip
    return out


def _quoted(text: str) -> str:
    return quote(text, safe="")


def saga_messages(db: Database, events: list[dict[str, Any]], start: dict[str, int]) -> list[str]:
    """One ``saga`` event per saga the new records touch (in the order they were touched)."""
    position = dict(start)
    keys: dict[tuple[str, str], None] = {}
    for event in events:
        position[event["origin"]] = event["seq"]
        if event["saga"] is not None:
            keys[(event["origin"], str(event["saga"]))] = None
    last = format_position(position)
    return [
        f"id: {last}\nevent: saga\ndata: {json.dumps(row)}\n\n" for row in saga_rows(db, list(keys))
    ]


@pages.get("/sagas-stream")
def sagas_stream(
    request: Request, config: Config, _: Annotated[Viewer, Depends(api_viewer)]
) -> Response:
    """The sagas list's event stream (``text/event-stream``), resumable by ``Last-Event-ID``."""
    return stream(request, config.db, saga_messages)


__all__ = ["pages", "saga_messages", "saga_rows"]
