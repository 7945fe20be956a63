"""Health, readiness, tokens, the kill switch (with its stream) and the audit trail."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

import anyio.to_thread
from fastapi import Depends, HTTPException, Path, Request
from fastapi.responses import StreamingResponse

from ..store import control, tokens
from ..store.tokens import Caller, Scope, authenticate
from .common import NOT_FOUND, Cursor, Limit, router
from .context import ServerContext, context
from .models import (
    AuditEventOut,
    AuditList,
    Health,
    Ready,
    ReasonIn,
    SwitchOut,
    TokenCreate,
    TokenCreated,
    TokenList,
    TokenOut,
    WhoAmI,
)
from .security import allow

api = router("control")
READY_WAIT = 2.0
"""Seconds readiness waits for a database connection (a pool being refilled) before 503."""
ANY: tuple[Scope, ...] = ("agent", "approver", "admin", "auditor")
STREAM_DOC: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/event-stream": {}}, "description": "kill-switch events"}
}


@api.get("/health", response_model=Health)
def health() -> Health:
    """Liveness: the process answers (no token needed, nothing disclosed)."""
    return Health(status="ok")


@api.get("/ready", response_model=Ready, responses={503: {"model": Ready}})
def ready(ctx: Annotated[ServerContext, Depends(context)]) -> Ready:
    """Readiness: the database answers now (503 otherwise). No token needed."""
    try:
        with ctx.db.transaction(write=False, wait=READY_WAIT) as tx:
            state = control.read_switch(tx)
    except Exception as exc:  # DatabaseUnavailable or anything the driver raises
        raise HTTPException(503, f"database unreachable: {type(exc).__name__}") from None
    return Ready(ready=True, database=ctx.db.kind, halted=state.halted)


@api.get("/whoami", response_model=WhoAmI)
def whoami(caller: Annotated[Caller, Depends(allow(*ANY))]) -> WhoAmI:
    """The token's scope, subject and origin."""
    return WhoAmI(**caller.__dict__)


def _token_out(info: tokens.TokenInfo) -> TokenOut:
    return TokenOut(**info.__dict__)


@api.post("/tokens", response_model=TokenCreated, status_code=201)
def create_token(
    body: TokenCreate,
    caller: Annotated[Caller, Depends(allow("admin"))],
    ctx: Annotated[ServerContext, Depends(context)],
) -> TokenCreated:
    """Issue a token (its text is in this answer only; the server keeps a hash)."""
    expires = None if body.expires_in is None else time.time() + body.expires_in
    with ctx.db.transaction() as tx:
        try:
            text, info = tokens.issue(
                ctx.db, body.scope, body.subject, origin=body.origin, expires_at=expires,
                created_by=caller.token_id, tx=tx,
            )  # fmt: skip
        except ValueError as exc:
            raise HTTPException(400, str(exc)) from None
        control.audit(
            tx,
            caller,
            "token.create",
            {"id": info.id, "scope": info.scope, "subject": info.subject, "origin": info.origin},
        )
    return TokenCreated(token=text, **_token_out(info).__dict__)


@api.get("/tokens", response_model=TokenList)
def list_tokens(
    caller: Annotated[Caller, Depends(allow("admin"))],
    ctx: Annotated[ServerContext, Depends(context)],
) -> TokenList:
    """Every token (never the secret)."""
    return TokenList(tokens=[_token_out(t) for t in tokens.list_tokens(ctx.db)])


@api.delete("/tokens/{token_id}", status_code=204, responses=NOT_FOUND)
def revoke_token(
    token_id: Annotated[str, Path(pattern=r"^[0-9a-f]{16}$")],
    caller: Annotated[Caller, Depends(allow("admin"))],
    ctx: Annotated[ServerContext, Depends(context)],
) -> None:
    """Revoke a token: every replica refuses it from its next request."""
    with ctx.db.transaction() as tx:
        if not tokens.revoke(ctx.db, token_id, tx=tx):
            raise HTTPException(404, f"no token {token_id}")
        control.audit(tx, caller, "token.revoke", {"id": token_id})


def _switch_out(state: control.SwitchState | None) -> SwitchOut:
    if state is None:
        return SwitchOut(
            halted=True,
            reason="control plane database unreadable",
            since=None,
            version=-1,
            readable=False,
            at=time.time(),
        )
    return SwitchOut(
        halted=state.halted,
        reason=state.reason,
        since=state.since,
        version=state.version,
        at=time.time(),
    )


@api.get("/killswitch", response_model=SwitchOut)
def get_switch(
    caller: Annotated[Caller, Depends(allow(*ANY))], ctx: Annotated[ServerContext, Depends(context)]
) -> SwitchOut:
    """The fleet's kill switch now."""
    return _switch_out(control.switch_state(ctx.db))


@api.post("/killswitch/halt", response_model=SwitchOut)
def halt(
    body: ReasonIn,
    caller: Annotated[Caller, Depends(allow("admin", "agent"))],
    ctx: Annotated[ServerContext, Depends(context)],
) -> SwitchOut:
    """Halt every agent of the fleet (admins, and agents: anyone may pull the brake). Audited."""
    state = control.halt(ctx.db, caller, body.reason)
    ctx.hub.poke()
    return _switch_out(state)


@api.post("/killswitch/resume", response_model=SwitchOut)
def resume(
    body: ReasonIn,
    caller: Annotated[Caller, Depends(allow("admin"))],
    ctx: Annotated[ServerContext, Depends(context)],
) -> SwitchOut:
    """Release the kill switch (admins only). Audited."""
    state = control.resume(ctx.db, caller, body.reason)
    ctx.hub.poke()
    return _switch_out(state)


@api.get("/killswitch/stream", response_class=StreamingResponse, responses=STREAM_DOC)
async def stream_switch(
    request: Request,
    caller: Annotated[Caller, Depends(allow(*ANY))],
    ctx: Annotated[ServerContext, Depends(context)],
) -> StreamingResponse:
    """Server-sent events: the switch's state at once, on every change, and every
    ``heartbeat`` seconds. The stream ends when the token stops being valid."""
    presented = request.headers.get("authorization", "").partition(" ")[2]

    async def events() -> AsyncIterator[str]:
        checked = time.monotonic()
        while True:
            changed = ctx.hub.event("killswitch")
            body = _switch_out(ctx.hub.switch).model_dump()
            yield f"event: state\ndata: {json.dumps(body)}\n\n"
            if time.monotonic() - checked > 1.0:
                checked = time.monotonic()
                still = await anyio.to_thread.run_sync(authenticate, ctx.db, presented)
                if still is None or await request.is_disconnected():
                    return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), ctx.settings.heartbeat)

    return StreamingResponse(events(), media_type="text/event-stream")


@api.get("/audit/events", response_model=AuditList)
def audit_events(
    caller: Annotated[Caller, Depends(allow("admin", "auditor"))],
    ctx: Annotated[ServerContext, Depends(context)],
    limit: Limit = 100,
    cursor: Cursor = None,
    order: Literal["oldest", "newest"] = "oldest",
) -> AuditList:
    """The control plane's own audit trail (halts, resumes, tokens, caps), oldest first or
    newest first."""
    newest = order == "newest"
    rows = control.audit_events(ctx.db, limit + 1, cursor, newest_first=newest)
    more = rows[limit - 1].id if len(rows) > limit else None
    return AuditList(events=[AuditEventOut(**r.__dict__) for r in rows[:limit]], next=more)
