"""Audit exports: a saga's disclosure bundle, a certify report, checkpoints and evidence."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, HTTPException, Path, Query

from ..store import audit as store
from ..store.checkpoints import list_checkpoints
from ..store.tokens import Caller, Scope
from .common import CONFLICT, NOT_FOUND, Cursor, Limit, router
from .context import ServerContext, context
from .models import CertifyOut, CheckpointList, CheckpointOut, ConflictList, ConflictOut
from .security import ORIGIN_PATTERN, allow

api = router("audit")
Origin = Annotated[str, Path(pattern=ORIGIN_PATTERN)]
READERS: tuple[Scope, ...] = ("admin", "auditor")


@api.get(
    "/audit/sagas/{origin}/{saga}/disclosure",
    response_model=dict[str, Any],
    responses={**NOT_FOUND, **CONFLICT},
)
def disclosure(
    origin: Origin,
    saga: Annotated[str, Path(min_length=1, max_length=500)],
    caller: Annotated[Caller, Depends(allow(*READERS))],
    ctx: Annotated[ServerContext, Depends(context)],
) -> dict[str, Any]:
    """One saga's records with inclusion proofs under the origin's latest checkpoint: a bundle
    ``agent-saga verify-proof bundle.json --key <origin's key>`` checks offline. 409 while no
    checkpoint covers the saga's end (or it has not ended)."""
    try:
        return store.disclosure(ctx.db, origin, saga)
    except store.AuditUnavailable as exc:
        status = 404 if "no saga" in str(exc) else 409  # not provable yet
        raise HTTPException(status, str(exc)) from None


@api.get("/audit/certify/{origin}", response_model=CertifyOut)
def certify(
    origin: Origin,
    caller: Annotated[Caller, Depends(allow(*READERS))],
    ctx: Annotated[ServerContext, Depends(context)],
) -> CertifyOut:
    """certify's findings over an origin's stored log: chain, checkpoint, every saga."""
    return CertifyOut(**store.certify(ctx.db, origin))


@api.get("/audit/checkpoints", response_model=CheckpointList)
def checkpoints(
    caller: Annotated[Caller, Depends(allow(*READERS))],
    ctx: Annotated[ServerContext, Depends(context)],
    origin: Annotated[str | None, Query(pattern=ORIGIN_PATTERN)] = None,
    limit: Limit = 50,
) -> CheckpointList:
    """Accepted checkpoints, newest first."""
    rows = list_checkpoints(ctx.db, origin, limit)
    return CheckpointList(checkpoints=[CheckpointOut(**r.__dict__) for r in rows])


@api.get("/audit/conflicts", response_model=ConflictList)
def conflicts(
    caller: Annotated[Caller, Depends(allow(*READERS))],
    ctx: Annotated[ServerContext, Depends(context)],
    origin: Annotated[str | None, Query(pattern=ORIGIN_PATTERN)] = None,
    limit: Limit = 50,
    cursor: Cursor = None,
) -> ConflictList:
    """Records and checkpoints the server refused, with why: evidence, oldest first."""
    rows = store.conflicts(ctx.db, origin, limit + 1, cursor)
    more = str(rows[limit - 1]["id"]) if len(rows) > limit else None
    return ConflictList(conflicts=[ConflictOut(**r) for r in rows[:limit]], next=more)
