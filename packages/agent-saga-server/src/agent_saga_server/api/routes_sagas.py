"""Sagas: the fleet's transactions, filtered and paginated, and one saga in full."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Depends, HTTPException, Path, Query

from ..store import approvals as approval_store
from ..store.sagas import CURSOR_PATTERN, BadCursor, SagaFilter, list_sagas, saga_view, view_json
from ..store.tokens import Caller
from .common import NOT_FOUND, Limit, not_found, router
from .context import ServerContext, context
from .models import MAX_INT, SagaDetail, SagaPage, SagaSummaryOut
from .routes_approvals import approval_out
from .security import ORIGIN_PATTERN, allow

api = router("sagas")
Status = Literal["running", "committed", "rolled_back", "needs_human"]


@api.get("/sagas", response_model=SagaPage)
def get_sagas(
    caller: Annotated[Caller, Depends(allow("admin", "auditor", "approver"))],
    ctx: Annotated[ServerContext, Depends(context)],
    status: Status | None = None,
    origin: Annotated[str | None, Query(pattern=ORIGIN_PATTERN)] = None,
    tool: Annotated[str | None, Query(min_length=1, max_length=500)] = None,
    since: Annotated[
        int | None, Query(ge=0, le=MAX_INT, description="started at or after (ms)")
    ] = None,
    until: Annotated[int | None, Query(ge=0, le=MAX_INT, description="started before (ms)")] = None,
    limit: Limit = 50,
    cursor: Annotated[
        str | None, Query(pattern=CURSOR_PATTERN, description="`next` of the previous page")
    ] = None,
) -> SagaPage:
    """Sagas newest first, filtered by status, origin, a tool they called and start time."""
    where = SagaFilter(status, origin, tool, since, until)
    try:
        page, more = list_sagas(ctx.db, where, limit, cursor)
    except BadCursor as exc:
        raise HTTPException(400, str(exc)) from None
    return SagaPage(sagas=[SagaSummaryOut(**s.__dict__) for s in page], next=more)


@api.get("/sagas/{origin}/{saga}", response_model=SagaDetail, responses=NOT_FOUND)
def get_saga(
    origin: Annotated[str, Path(pattern=ORIGIN_PATTERN)],
    saga: Annotated[str, Path(min_length=1, max_length=500)],
    caller: Annotated[Caller, Depends(allow("admin", "auditor", "approver"))],
    ctx: Annotated[ServerContext, Depends(context)],
) -> SagaDetail:
    """One saga as ``agent-saga replay`` tells it: steps with their outcomes, approvals and
    compensations, rollbacks; and the approval requests the server holds for it."""
    view = saga_view(ctx.db, origin, saga)
    if view is None:
        raise not_found(f"saga {saga} from {origin}")
    requests = approval_store.list_approvals(ctx.db, None, origin, 1000, None, saga=saga)
    return SagaDetail(
        origin=origin, saga=view_json(view), approvals=[approval_out(r) for r in requests]
    )
