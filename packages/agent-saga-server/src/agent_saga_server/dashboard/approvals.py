"""The approval queue: every pending request with its action in full (tool, semantics,
arguments as the agent logged them, redacted fields masked by the agent before they left it),
its action digest, requester and expiry; approve or deny with a note.

The approver is the session's subject, never a form field. A vote goes through the same store
function as the API's votes (:func:`agent_saga_server.store.approvals.vote`): quorum, expiry,
the allowed approvers and single use are checked there, in one transaction; and like them it
wakes the waiting agent's long-poll at once (:func:`..api.routes_approvals.announce_vote`). Under
``agent-saga ui`` the queue also lists the home's own requests, and a vote on one goes to the
home's log (:mod:`.home`), where the kit waiting on it reads votes.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Form, HTTPException, Path, Query
from fastapi.responses import Response

from ..api.context import ServerContext, context
from ..api.routes_approvals import announce_vote
from ..store import approvals as approval_store
from .home import pending as home_pending
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
    if config.home is not None:
        pending = sorted(pending + home_pending(config.db), key=lambda r: r.requested_at)
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
    ctx: Annotated[ServerContext, Depends(context)],
    request_id: RequestId,
    decision: Annotated[Literal["approve", "deny"], Form()],
    note: Annotated[str, Form(max_length=2000)] = "",
) -> Response:
    """The session's subject votes on one request; back to the queue, which says what became
    of it."""
    if not viewer.may_decide:
        raise HTTPException(403, f"a {viewer.role} session may not decide approvals")
    if config.home is not None and approval_store.get(config.db, request_id) is None:
        return _home_vote(config, viewer, request_id, decision, note)
    try:
        row = approval_store.vote(
            config.db, request_id, viewer.subject, decision, note, f"ui:{viewer.session_id}"
        )
    except approval_store.ApprovalRefused as refused:
        return _queue(
            config, viewer, refused.status, problem=str(refused), decided="", decided_status=""
        )
    announce_vote(ctx.hub, row)  # the waiting agent's long-poll answers now
    return redirect(f"/approvals?decided={row.id}&status={row.status}")


def _home_vote(
    config: Config, viewer: FormViewer, request_id: str, decision: str, note: str
) -> Response:
    """A vote on a request of the home ``agent-saga ui`` serves, written to the home's log
    (the kit waiting there counts it). What the page says follows from the vote: a deny, or
    the approval that reaches the quorum, decides; the kit writes the decision."""
    assert config.home is not None
    request = next((r for r in home_pending(config.db) if r.id == request_id), None)
    result = config.home.vote(request_id, viewer.subject, decision, note)
    if not result.accepted:
        return _queue(config, viewer, 409, problem=result.message, decided="", decided_status="")
    approvals = 1 + sum(v.decision == "approve" for v in (request.votes if request else []))
    quorum = request.quorum if request else 1
    status = "denied" if decision == "deny" else "approved" if approvals >= quorum else "pending"
    return redirect(f"/approvals?decided={request_id}&status={status}")


__all__ = ["at", "pages"]
