"""Approvers' passkeys, for admins: enrolment codes, and listing and revoking passkeys.

A dashboard session cannot register a passkey on its own (see
:mod:`agent_saga_server.dashboard.enrolment`): its subject's first passkey needs a one-time
enrolment code that an admin asks for here (or with ``agent-saga cloud-server passkeys enrol``)
and hands to that person. Each issue and each revocation is audited.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Path, Query

from ..dashboard.enrolment import issue_code, list_passkeys, revoke_passkey
from ..store import control
from ..store.tokens import Caller
from .common import NOT_FOUND, router
from .context import ServerContext, context
from .models import EnrolmentCreate, EnrolmentCreated, PasskeyList, PasskeyOut
from .security import allow

api = router("passkeys")
CredentialId = Annotated[str, Path(pattern=r"^[0-9a-f]{2,1400}$")]
Subject = Annotated[str | None, Query(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")]


@api.post("/passkeys/enrolments", response_model=EnrolmentCreated, status_code=201)
def create_enrolment(
    body: EnrolmentCreate,
    caller: Annotated[Caller, Depends(allow("admin"))],
    ctx: Annotated[ServerContext, Depends(context)],
) -> EnrolmentCreated:
    """A one-time code that lets ``subject`` register a passkey on the dashboard (their first,
    or another). Its text is in this answer only (the server keeps its SHA-256); it expires
    after ``expires_in`` seconds (15 minutes by default) and is spent by the first passkey
    registered with it."""
    with ctx.db.transaction() as tx:
        issued = issue_code(tx, body.subject, caller.actor, float(body.expires_in))
        control.audit(tx, caller, "passkey.enrolment", {
            "id": issued.id, "subject": issued.subject, "expires_at": issued.expires_at,
        })  # fmt: skip
    return EnrolmentCreated(**issued.__dict__)


@api.get("/passkeys", response_model=PasskeyList)
def get_passkeys(
    caller: Annotated[Caller, Depends(allow("admin"))],
    ctx: Annotated[ServerContext, Depends(context)],
    subject: Subject = None,
) -> PasskeyList:
    """Registered passkeys (of ``subject``, or every one), oldest first."""
    found = list_passkeys(ctx.db, subject)
    return PasskeyList(passkeys=[PasskeyOut(**p.__dict__) for p in found])


@api.delete("/passkeys/{credential_id}", status_code=204, responses=NOT_FOUND)
def delete_passkey(
    credential_id: CredentialId,
    caller: Annotated[Caller, Depends(allow("admin"))],
    ctx: Annotated[ServerContext, Depends(context)],
) -> None:
    """Revoke a passkey: from now on no vote it signs verifies on this control plane."""
    with ctx.db.transaction() as tx:
        subject = revoke_passkey(tx, credential_id)
        if subject is None:
            raise HTTPException(404, f"no passkey {credential_id[:64]}")
        details = {"credential": credential_id, "subject": subject}
        control.audit(tx, caller, "passkey.revoke", details)
