"""The approval queue: every pending request with its action in full (tool, semantics,
arguments as the agent logged them, redacted fields masked by the agent before they left it),
its action digest, requester and expiry; approve or deny with a note.

The approver is the session's subject, never a form field. A vote goes through the same store
function as the API's votes (:func:`agent_saga_server.store.approvals.vote`): quorum, expiry,
the allowed approvers and single use are checked there, in one transaction.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Form, HTTPException, Path, Query
from fastapi.responses import Response

from ..store import approvals as approval_store
from .passkeys import credentials
from .web import Config, FormViewer, PageViewer, redirect, render

pages = APIRouter()
RequestId = Annotated[str, Path(min_length=1, max_length=200)]


def at(seconds: float | None) -> str:
    """A server time (seconds) as UTC text."""
    if seconds is None:
        return ""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _queue(config: Config, viewer: PageViewer, status: int = 200, **extra: object) -> Response:
    pending = approval_store.list_approvals(config.db, "pending", None, 200, None)
    return render(
        "approvals.html", viewer, status, pending=pending, at=at,
        has_passkey=bool(credentials(config.db, viewer.subject)),
        shown=lambda value: json.dumps(value, indent=1, sort_keys=True), **extra,
    )  # fmt: skip


@pages.get("/approvals")
def approvals_page(
    viewer: PageViewer,
    config: Config,
    decided: Annotated[str, Query(max_length=200)] = "",
    status: Annotated[str, Query(max_length=20)] = "",
) -> Response:
    """The pending requests, oldest first (and what became of the one just decided)."""
    return _queue(config, viewer, decided=decided, decided_status=status)


@pages.post("/approvals/{request_id}")
def decide(
    viewer: FormViewer,
    config: Config,
    request_id: RequestId,
    decision: Annotated[Literal["approve", "deny"], Form()],
    note: Annotated[str, Form(max_length=2000)] = "",
) -> Response:
    """The session's subject votes on one request; back to the queue, which says what became
    of it."""
    if not viewer.may_decide:
        raise HTTPException(403, f"a {viewer.role} session may not decide approvals")
    try:
        row = approval_store.vote(
            config.db, request_id, viewer.subject, decision, note, f"ui:{viewer.session_id}"
        )
    except approval_store.ApprovalRefused as refused:
        return _queue(
            config, viewer, refused.status, problem=str(refused), decided="", decided_status=""
        )
    return redirect(f"/approvals?decided={row.id}&status={row.status}")


__all__ = ["at", "pages"]
