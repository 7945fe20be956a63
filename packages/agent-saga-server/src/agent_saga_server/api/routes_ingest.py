"""Ingest: agents push their log records and checkpoints; anyone allowed reads an origin's tail."""

from __future__ import annotations

from typing import Annotated, Any

import anyio.to_thread
from fastapi import Depends, HTTPException, Request

from ..store import ingest as ingest_store
from ..store.checkpoints import accept_checkpoint
from ..store.ingest import IngestRefused, origin_state
from ..store.tokens import Caller
from .common import CONFLICT, UNPROCESSABLE, router
from .context import ServerContext, context
from .ingest_body import records_of, request_body_doc
from .models import CheckpointIn, CheckpointOut, IngestOut, OriginList, OriginOut
from .security import OriginPath, allow, for_origin

api = router("ingest")


def _origin_out(state: ingest_store.OriginState) -> OriginOut:
    return OriginOut(
        origin=state.origin,
        last_seq=state.last_seq,
        last_hash=state.last_hash,
        checkpoint_size=state.checkpoint_size,
        checkpoint=state.checkpoint_note,
        verifier=state.verifier,
    )


@api.get("/origins", response_model=OriginList)
def list_origins(
    caller: Annotated[Caller, Depends(allow("admin", "auditor"))],
    ctx: Annotated[ServerContext, Depends(context)],
) -> OriginList:
    """Every origin the server holds records of, with its tail and latest checkpoint."""
    with ctx.db.transaction(write=False) as tx:
        names = [str(r[0]) for r in tx.all("SELECT origin FROM origins ORDER BY origin")]
        states = [origin_state(tx, name) for name in names]
    return OriginList(origins=[_origin_out(s) for s in states])


@api.get("/origins/{origin}", response_model=OriginOut)
def get_origin(
    origin: OriginPath,
    caller: Annotated[Caller, Depends(for_origin("agent", "admin", "auditor"))],
    ctx: Annotated[ServerContext, Depends(context)],
) -> OriginOut:
    """Where the server's copy of an origin's log ends (agents resume shipping from here)."""
    with ctx.db.transaction(write=False) as tx:
        return _origin_out(origin_state(tx, origin))


@api.post(
    "/origins/{origin}/records",
    response_model=IngestOut,
    responses={**CONFLICT, **UNPROCESSABLE},
    openapi_extra={"requestBody": request_body_doc()},
)
async def post_records(
    origin: OriginPath,
    request: Request,
    caller: Annotated[Caller, Depends(for_origin("agent"))],
    ctx: Annotated[ServerContext, Depends(context)],
) -> IngestOut:
    """Append a batch of records (consecutive, in seq order) to the origin's copy.

    Idempotent: records already stored are skipped when identical. All or nothing: a record
    that differs from the stored one (409), breaks the chain (409/422) or leaves a gap (422)
    refuses the whole batch, and the batch is kept as evidence.
    """
    # parsed strictly by the route class; the records checked as IngestBody would check them,
    # in the thread pool with the chain check and the insert (not on the event loop)
    body = await request.json()
    try:
        result = await anyio.to_thread.run_sync(_ingest, ctx, origin, body, caller.token_id)
    except IngestRefused as refused:
        raise HTTPException(refused.status, str(refused)) from None
    return IngestOut(
        accepted=result.accepted,
        duplicates=result.duplicates,
        last_seq=result.last_seq,
        last_hash=result.last_hash,
    )


def _ingest(ctx: ServerContext, origin: str, body: Any, token: str) -> ingest_store.IngestResult:
    return ingest_store.ingest(ctx.db, origin, records_of(body), token)


@api.post(
    "/origins/{origin}/checkpoints",
    response_model=CheckpointOut,
    responses={**CONFLICT, **UNPROCESSABLE},
)
def post_checkpoint(
    origin: OriginPath,
    body: CheckpointIn,
    caller: Annotated[Caller, Depends(for_origin("agent"))],
    ctx: Annotated[ServerContext, Depends(context)],
) -> CheckpointOut:
    """Submit a signed checkpoint with a consistency proof from the last accepted one
    (base64 hashes; empty for the first). The root must be that of the records received."""
    try:
        accepted = accept_checkpoint(
            ctx.db, origin, body.note, body.proof, body.verifier, caller.token_id
        )
    except IngestRefused as refused:
        raise HTTPException(refused.status, str(refused)) from None
    return CheckpointOut(**accepted.__dict__)
