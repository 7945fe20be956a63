"""The passkey routes: registering an approver's passkey, and approving or denying with one.

Registering takes an enrolment code from an admin, or (for another passkey) an assertion by one
of the subject's passkeys, checked before the browser makes the credential
(``POST /passkeys/options``) and again when it is stored (:mod:`.enrolment`). Every
registration and every refused step is in the audit trail (``passkey.register``,
``passkey.refused``).

They answer JSON to the dashboard's script (``dashboard.js``), which passes the options to
``navigator.credentials`` and posts the result back. Each POST carries the session's CSRF token
in an ``X-CSRF-Token`` header and must come from the dashboard's own origin. Passkeys need the
page on a host name (``http://localhost:PORT``), not an IP address.
"""

from __future__ import annotations

import hmac
import ipaddress
from typing import Annotated, Any, Literal, cast

from fastapi import APIRouter, Depends, HTTPException, Path, Request
from fastapi.responses import JSONResponse, Response

from ..api.context import ServerContext, context
from ..api.routes_approvals import announce_vote
from ..api.strict import BadJSON, strict_json
from ..store import approvals as approval_store
from ..store.control import audit
from ..store.tokens import Caller, Scope
from .enrolment import EnrolmentRefused, check_code
from .passkeys import (
    PasskeyRefused,
    Where,
    credentials,
    enrol_options,
    register,
    registration_options,
    verify_enrolment,
    verify_vote,
    vote_options,
)
from .sessions import Viewer
from .web import (
    PREFIX,
    Config,
    PageViewer,
    api_viewer,
    host_name,
    page_headers,
    render,
    same_origin,
)

pages = APIRouter()
RequestId = Annotated[str, Path(min_length=1, max_length=200)]


def where(request: Request) -> Where:
    """The page's origin and RP id; a 400 on an IP address (WebAuthn needs a host name)."""
    host = request.headers.get("host", "")
    name = host_name(host)
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return Where(f"{request.url.scheme}://{host}", name)
    raise HTTPException(400, "passkeys need a host name: open the dashboard on localhost")


def json_viewer(request: Request, viewer: Annotated[Viewer, Depends(api_viewer)]) -> Viewer:
    """The session's viewer of a script's POST: its own origin, and the CSRF header."""
    same_origin(request)
    sent = request.headers.get("x-csrf-token", "")
    if not hmac.compare_digest(sent.encode(), viewer.csrf.encode()):
        raise HTTPException(403, "the CSRF token is missing or wrong; reload the page")
    return viewer


ScriptViewer = Annotated[Viewer, Depends(json_viewer)]


async def _body(request: Request) -> dict[str, Any]:
    try:
        body = strict_json(await request.body())
    except BadJSON as exc:
        raise HTTPException(400, f"bad JSON body: {exc}") from None
    if not isinstance(body, dict):
        raise HTTPException(400, "the body must be a JSON object")
    return body


def _answer(value: dict[str, Any], status: int = 200) -> Response:
    return JSONResponse(value, status, headers=page_headers())


def _deciding(viewer: Viewer, config: Config, request_id: str) -> approval_store.ApprovalRow:
    if not viewer.may_decide:
        raise HTTPException(403, f"a {viewer.role} session may not decide approvals")
    found = approval_store.get(config.db, request_id)
    if found is None:
        raise HTTPException(404, f"no approval request {request_id}")
    return found


@pages.get("/passkeys")
def passkeys_page(viewer: PageViewer, config: Config) -> Response:
    return render("passkeys.html", viewer, keys=credentials(config.db, viewer.subject))


def _actor(viewer: Viewer) -> Caller:
    return Caller(f"ui:{viewer.session_id}", cast(Scope, viewer.role), viewer.subject, None)


def _refused(config: Config, viewer: Viewer, stage: str, reason: str, status: int) -> Response:
    """A refused registration step: audited (``passkey.refused``), answered in one line."""
    with config.db.transaction() as tx:
        audit(tx, _actor(viewer), "passkey.refused", {
            "subject": viewer.subject, "stage": stage, "reason": reason,
        })  # fmt: skip
    return _answer({"detail": reason}, status)


def _grant(config: Config, request: Request, viewer: Viewer, body: dict[str, Any]) -> str:
    """What allows this session's subject to register a passkey: an enrolment code, or an
    assertion by one of its passkeys (see :mod:`.enrolment`).

    Raises:
        PasskeyRefused: neither is given, or the one given does not hold.
    """
    code, assertion = body.get("code"), body.get("assertion")
    if isinstance(code, str) and code.strip():
        try:
            return "code:" + check_code(config.db, code[:200], viewer.subject)
        except EnrolmentRefused as exc:
            raise PasskeyRefused(str(exc)) from None
    if isinstance(assertion, dict):
        made_by = verify_enrolment(
            config.db, where(request), viewer.subject,
            str(assertion.get("challenge_id", ""))[:100], assertion.get("credential"),
        )  # fmt: skip
        return "passkey:" + made_by
    raise PasskeyRefused(
        "registering a passkey needs an enrolment code from an admin"
        + (" or one of your passkeys" if credentials(config.db, viewer.subject) else "")
    )


@pages.post("/passkeys/enrol-options")
def passkey_enrol_options(request: Request, viewer: ScriptViewer, config: Config) -> Response:
    """Options for an assertion by one of the subject's passkeys (to register another)."""
    try:
        return _answer(enrol_options(config.db, where(request), viewer.subject))
    except PasskeyRefused as exc:
        return _refused(config, viewer, "enrol-options", str(exc), 409)


@pages.post("/passkeys/options")
async def passkey_options(request: Request, viewer: ScriptViewer, config: Config) -> Response:
    """Options for a new credential, once the body's code or assertion is checked."""
    body = await _body(request)
    try:
        grant = _grant(config, request, viewer, body)
    except PasskeyRefused as exc:
        return _refused(config, viewer, "options", str(exc), 403)
    return _answer(registration_options(config.db, where(request), viewer.subject, grant))


@pages.post("/passkeys")
async def passkey_register(request: Request, viewer: ScriptViewer, config: Config) -> Response:
    body = await _body(request)
    try:
        found, _ = register(
            config.db, where(request), _actor(viewer), str(body.get("challenge_id", ""))[:100],
            body.get("credential"),
        )  # fmt: skip
    except PasskeyRefused as exc:
        return _refused(config, viewer, "register", str(exc), 400)
    return _answer({"registered": found})


@pages.post("/approvals/{request_id}/passkey-options")
async def approval_options(
    request: Request, viewer: ScriptViewer, config: Config, request_id: RequestId
) -> Response:
    """Options for a passkey assertion committing to this request and the chosen decision."""
    body = await _body(request)
    decision: Literal["approve", "deny"] | None = body.get("decision")
    if decision not in ("approve", "deny"):
        raise HTTPException(400, "decision must be approve or deny")
    row = _deciding(viewer, config, request_id)
    try:
        return _answer(vote_options(config.db, where(request), viewer.subject, row, decision))
    except PasskeyRefused as exc:
        return _answer({"detail": str(exc)}, 409)


@pages.post("/approvals/{request_id}/passkey")
async def approval_with_passkey(
    request: Request,
    viewer: ScriptViewer,
    config: Config,
    ctx: Annotated[ServerContext, Depends(context)],
    request_id: RequestId,
) -> Response:
    """Verify the assertion against the request as held now, then cast the vote it signed."""
    body = await _body(request)
    row = _deciding(viewer, config, request_id)
    note = str(body.get("note", ""))[:2000]
    try:
        signed = verify_vote(
            config.db, where(request), viewer.subject, row,
            str(body.get("challenge_id", "")), body.get("credential"),
        )  # fmt: skip
        voted = approval_store.vote(
            config.db, row.id, viewer.subject, signed.decision, note,
            f"ui-passkey:{viewer.session_id}", passkey=signed.proof,
        )  # fmt: skip
    except PasskeyRefused as exc:
        return _answer({"detail": str(exc)}, 403)
    except approval_store.ApprovalRefused as exc:
        return _answer({"detail": str(exc)}, exc.status)
    announce_vote(ctx.hub, voted)  # the waiting agent's long-poll answers now
    next_page = f"{PREFIX}/approvals?decided={voted.id}&status={voted.status}"
    return _answer({"status": voted.status, "next": next_page})


__all__ = ["pages", "where"]
