"""Approvals: agents create requests and wait; approvers list pending ones and vote."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Literal

import anyio.to_thread
from fastapi import Depends, HTTPException, Path, Query, Response
from pydantic import BaseModel

from ..store import approvals as store
from ..store.approvals import ApprovalRefused, ApprovalRow
from ..store.tokens import Caller, approver_subjects
from .common import CONFLICT, NOT_FOUND, Limit, not_found, router
from .context import ServerContext, context
from .hub import ChangeHub
from .models import ApprovalCreate, ApprovalList, ApprovalOut, ApproverList, VoteIn, VoteOut
from .security import allow, own_origin

api = router("approvals")
REQUEST_ID = r"^apr-[0-9a-f]{16}$"
RequestId = Annotated[str, Path(pattern=REQUEST_ID)]
Wait = Annotated[float, Query(ge=0, le=30, description="seconds to wait for a change")]


def approval_out(row: ApprovalRow) -> ApprovalOut:
    data = dict(row.__dict__)
    data["votes"] = [VoteOut(**v.__dict__) for v in row.votes]
    return ApprovalOut(**data)


def as_json(model: BaseModel, status: int = 200) -> Response:
    """``model`` (built by its own validation) as the JSON answer. Returned as a response,
    FastAPI neither converts it to a dict nor validates it a second time against the route's
    ``response_model`` (which still documents it)."""
    return Response(model.model_dump_json(), status, media_type="application/json")


@contextmanager
def wait_slot(
    ctx: ServerContext, caller: Caller, wait: float, refuse: bool = True
) -> Iterator[float]:
    """Hold one of the caller's token's long-poll slots while a ``wait`` runs; yields the
    seconds granted (``wait``, or 0 when none is taken: ``wait=0``, or every slot held and
    not ``refuse``). Runs on the event loop, so the counts need no lock.

    Raises:
        HTTPException: 429 when the token already holds ``max_waits_per_token`` long-polls and
            ``refuse`` is set.
    """
    held, most = ctx.waits.get(caller.token_id, 0), ctx.settings.max_waits_per_token
    if wait <= 0 or (held >= most and not refuse):
        yield 0.0
        return
    if held >= most:
        raise HTTPException(
            429,
            f"{held} long-polls are already waiting with this token (at most {most}); "
            "retry once one of them has answered",
        )
    ctx.waits[caller.token_id] = held + 1
    try:
        yield wait
    finally:
        left = ctx.waits[caller.token_id] - 1
        if left:
            ctx.waits[caller.token_id] = left
        else:
            del ctx.waits[caller.token_id]


# The routes an approval's round trip takes are coroutines that send only the database work to
# the thread pool: a plain function route costs two trips through the pool (the function, then
# its answer's validation), a coroutine one. Each answers with :func:`as_json`.


@api.get("/approvers", response_model=ApproverList)
async def list_approvers(
    caller: Annotated[Caller, Depends(allow("agent", "admin", "auditor"))],
    ctx: Annotated[ServerContext, Depends(context)],
) -> Response:
    """The subjects of the approver tokens valid now (who may be asked)."""
    subjects = await anyio.to_thread.run_sync(approver_subjects, ctx.db)
    return as_json(ApproverList(approvers=subjects))


@api.post("/approvals", response_model=ApprovalOut, status_code=201, responses=CONFLICT)
async def create_approval(
    body: ApprovalCreate,
    caller: Annotated[Caller, Depends(allow("agent"))],
    ctx: Annotated[ServerContext, Depends(context)],
    wait: Wait = 0,
) -> Response:
    """An agent asks for a decision on one step of one of its sagas (idempotent by id).
    With ``wait``, the answer waits as ``GET /v1/approvals/{id}?wait=`` does: the request
    once decided (or expired), or after that many seconds as it then stands (pending). When
    the token already holds ``max_waits_per_token`` long-polls the request is stored and
    answered at once, without waiting."""
    assert caller.origin is not None
    with wait_slot(ctx, caller, wait, refuse=False) as granted:  # no slot: answered at once
        event = ctx.hub.event("approvals")  # before the request exists: no vote can be missed
        try:
            row, _ = await anyio.to_thread.run_sync(
                store.create, ctx.db, caller.origin, body.model_dump()
            )
        except ApprovalRefused as exc:
            raise HTTPException(exc.status, str(exc)) from None
        ctx.hub.poke(rereads="approvals")
        found = await _once_decided(ctx, caller, row.id, granted, row, event) if granted else row
    return as_json(found if isinstance(found, ApprovalOut) else approval_out(found), 201)


@api.get("/approvals", response_model=ApprovalList)
async def list_approvals(
    caller: Annotated[Caller, Depends(allow("approver", "admin", "auditor", "agent"))],
    ctx: Annotated[ServerContext, Depends(context)],
    status: Literal["pending", "approved", "denied", "expired"] | None = None,
    wait: Wait = 0,
    limit: Limit = 50,
    after: Annotated[
        str | None, Query(pattern=REQUEST_ID, description="`next` of the previous page")
    ] = None,
) -> Response:
    """Requests, oldest first (after the request ``after``), in full: the action's arguments
    and digest. With ``wait``, an empty answer waits up to that long for a new or changed one.
    An agent token sees its own origin's requests only."""
    origin = caller.origin if caller.scope == "agent" else None
    deadline = time.monotonic() + min(wait, ctx.settings.max_wait)
    with wait_slot(ctx, caller, wait):
        while True:
            event = ctx.hub.event("approvals")
            rows = await anyio.to_thread.run_sync(
                store.list_approvals, ctx.db, status, origin, limit + 1, after
            )
            left = deadline - time.monotonic()
            if rows or left <= 0:
                more = rows[limit - 1].id if len(rows) > limit else None
                page = ApprovalList(approvals=[approval_out(r) for r in rows[:limit]], next=more)
                return as_json(page)
            try:
                await asyncio.wait_for(event.wait(), left)
            except TimeoutError:
                continue


@api.get("/approvals/{request_id}", response_model=ApprovalOut, responses=NOT_FOUND)
async def get_approval(
    request_id: RequestId,
    caller: Annotated[Caller, Depends(allow("agent", "approver", "admin", "auditor"))],
    ctx: Annotated[ServerContext, Depends(context)],
    wait: Wait = 0,
) -> Response:
    """One request with its votes. With ``wait``, a pending request is answered once it is
    decided (or expires), or after that many seconds: how a waiting agent learns the decision.
    A token holding ``max_waits_per_token`` long-polls already gets a 429 for another."""
    with wait_slot(ctx, caller, wait):
        event = ctx.hub.event("approvals")
        found = await _once_decided(ctx, caller, request_id, wait, None, event)
    return as_json(found if isinstance(found, ApprovalOut) else approval_out(found))


async def _once_decided(
    ctx: ServerContext,
    caller: Caller,
    request_id: str,
    wait: float,
    row: ApprovalRow | None,
    event: asyncio.Event,
) -> ApprovalRow | ApprovalOut:
    """The request once it is decided or expired, or as it stands after ``wait`` seconds.
    ``row``: the request as read (or written) after ``event`` was taken (``None``: read it)."""
    deadline = time.monotonic() + min(wait, ctx.settings.max_wait)
    while True:
        if row is None:
            row = await anyio.to_thread.run_sync(store.get, ctx.db, request_id)
            if row is None:
                raise not_found(f"approval request {request_id}")
            own_origin(caller, row.origin)
        left = min(deadline - time.monotonic(), row.expires_at - time.time())
        if row.status != "pending" or left <= 0:
            return row
        try:
            await asyncio.wait_for(event.wait(), left)
        except TimeoutError:
            pass
        else:
            decided = ctx.hub.settled(request_id)  # decided through this process: no read back
            if isinstance(decided, ApprovalOut):
                return decided
        event, row = ctx.hub.event("approvals"), None


@api.post(
    "/approvals/{request_id}/votes",
    response_model=ApprovalOut,
    responses={**NOT_FOUND, **CONFLICT},
)
async def post_vote(
    request_id: RequestId,
    body: VoteIn,
    caller: Annotated[Caller, Depends(allow("approver"))],
    ctx: Annotated[ServerContext, Depends(context)],
) -> Response:
    """Approve or deny, as the approver the token names (the body names nobody)."""
    try:
        row = await anyio.to_thread.run_sync(
            store.vote, ctx.db, request_id, caller.subject, body.decision, body.note,
            caller.token_id,
        )  # fmt: skip
    except ApprovalRefused as exc:
        raise HTTPException(exc.status, str(exc)) from None
    return as_json(announce_vote(ctx.hub, row))


def announce_vote(hub: ChangeHub, row: ApprovalRow) -> ApprovalOut:
    """Wake this process's long-polls on approvals at once after a vote was committed (from
    any thread; every path that votes calls it: the API, the dashboard's forms and its passkey
    votes). A decision is handed to them with it, so the waiting agent's long-poll answers
    without reading it back. Other replicas learn of it by the vote's ``NOTIFY``. Returns the
    request as the API answers it."""
    answer = approval_out(row)
    if row.status != "pending":
        hub.settle(row.id, answer)
    hub.poke(rereads="approvals")
    return answer
