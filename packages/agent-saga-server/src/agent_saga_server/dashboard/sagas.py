"""The sagas pages: the fleet's sagas (filtered, paginated, newest first) and one saga's
timeline (replay), with its disclosure bundle for download.

Both read what the API's sagas routes read (:mod:`agent_saga_server.store.sagas`); a page of
the list costs one indexed query whatever the log's size.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Annotated, Any

from agent_saga import CompensationState
from fastapi import APIRouter, Path, Query
from fastapi.responses import JSONResponse, Response

from ..store import approvals as approval_store
from ..store.audit import AuditUnavailable, disclosure
from ..store.db import Database
from ..store.ingest import origin_state
from ..store.sagas import CURSOR_PATTERN, BadCursor, SagaFilter, list_sagas, saga_view
from ..store.tokens import NAME
from .web import Config, PageViewer, page_headers, render

pages = APIRouter()
STATUSES = ("running", "committed", "rolled_back", "needs_human")
PAGE_SIZE = 50
_CURSOR = re.compile(CURSOR_PATTERN)
SagaName = Annotated[str, Path(min_length=1, max_length=500)]
Origin = Annotated[str, Path(pattern=NAME.pattern)]


def when(ms: int | None) -> str:
    """A record time (milliseconds) as UTC text; an empty string for none."""
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _filter(status: str, origin: str, tool: str) -> tuple[SagaFilter, list[str]]:
    problems = []
    if status and status not in STATUSES:
        problems.append(f"status must be one of {', '.join(STATUSES)}")
    if origin and not NAME.fullmatch(origin):
        problems.append("origin is not a valid origin name")
    where = SagaFilter(
        status=status if status in STATUSES else None,
        origin=origin if origin and NAME.fullmatch(origin) else None,
        tool=tool or None,
    )
    return where, problems


@pages.get("/")
@pages.get("/sagas")
def sagas_page(
    viewer: PageViewer,
    config: Config,
    status: Annotated[str, Query(max_length=20)] = "",
    origin: Annotated[str, Query(max_length=128)] = "",
    tool: Annotated[str, Query(max_length=500)] = "",
    cursor: Annotated[str, Query(max_length=700)] = "",
) -> Response:
    """Sagas newest first, :data:`PAGE_SIZE` a page, filtered by status, origin and tool."""
    where, problems = _filter(status, origin, tool)
    if cursor and not _CURSOR.fullmatch(cursor):
        problems.append("the page cursor is not one this dashboard handed out")
    found: list[Any] = []
    more = None
    if not problems:
        try:
            found, more = list_sagas(config.db, where, PAGE_SIZE, cursor or None)
        except BadCursor as exc:
            problems.append(str(exc))
    filters = {"status": status, "origin": origin, "tool": tool}
    return render(
        "sagas.html", viewer, 400 if problems else 200, sagas=found, next=more,
        filters=filters, statuses=STATUSES, problems=problems, when=when, paged=bool(cursor),
    )  # fmt: skip


def _verification(db: Database, origin: str, last_seq: int) -> str:
    with db.transaction(write=False) as tx:
        state = origin_state(tx, origin)
    if state.checkpoint_size >= last_seq > 0:
        return (
            f"covered by checkpoint {state.checkpoint_size} of {origin}; chain checked on arrival"
        )
    if state.checkpoint_size:
        return (
            f"chain checked on arrival; not yet covered by a checkpoint "
            f"(the latest covers {state.checkpoint_size} records)"
        )
    return f"chain checked on arrival; no checkpoint received from {origin} yet"


def _compensations(view: Any) -> list[dict[str, Any]]:
    """Each rollback with its compensated and failed steps in log order (newest step first)."""
    tools = {step.ordinal: step.tool for step in view.steps}
    out = []
    for rollback in view.rollbacks:
        done = [{"ordinal": o, "tool": tools.get(o, "?"), "ok": True} for o in rollback.compensated]
        bad = [{"ordinal": o, "tool": tools.get(o, "?"), "ok": False} for o in rollback.failed]
        out.append({"rollback": rollback, "steps": done + bad})
    return out


@pages.get("/sagas/{origin}/{saga}")
def saga_page(viewer: PageViewer, config: Config, origin: Origin, saga: SagaName) -> Response:
    """One saga's timeline: each step's gate decision, approval, intent, outcome and
    compensation, the rollbacks newest step first, and the verification state."""
    view = saga_view(config.db, origin, saga)
    if view is None:
        return render("missing.html", viewer, 404, what=f"saga {saga} from {origin}")
    requests = approval_store.list_approvals(config.db, None, origin, 100, None, saga=saga)
    return render(
        "saga.html", viewer, origin=origin, saga=view, approvals=requests, when=when,
        rollbacks=_compensations(view), verification=_verification(config.db, origin,
        view.last_seq), shown=lambda value: json.dumps(value, indent=1, sort_keys=True),
        not_needed=CompensationState.NOT_NEEDED,
    )  # fmt: skip


@pages.get("/sagas/{origin}/{saga}/bundle.json")
def saga_bundle(viewer: PageViewer, config: Config, origin: Origin, saga: SagaName) -> Response:
    """The saga's disclosure bundle (a download), or a page saying why there is none yet."""
    try:
        bundle = disclosure(config.db, origin, saga)
    except AuditUnavailable as exc:
        return render("missing.html", viewer, 409, what=f"disclosure bundle: {exc}")
    name = re.sub(r"[^A-Za-z0-9._-]", "_", saga)[:80]
    headers = {**page_headers(), "content-disposition": f'attachment; filename="{name}.json"'}
    return JSONResponse(bundle, headers=headers)


__all__ = ["pages", "when"]
