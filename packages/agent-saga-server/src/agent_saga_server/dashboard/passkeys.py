"""Approvers' passkeys (WebAuthn, py_webauthn): registration, and approvals signed by them.

* **Registration** needs a grant (:mod:`.enrolment`): an admin's one-time enrolment code, or
  an assertion by one of the subject's passkeys (:func:`enrol_options`,
  :func:`verify_enrolment`); a session alone (a pasted approver token) is not enough. Then the
  server hands out a one-time challenge carrying that grant, the browser's authenticator makes
  a credential (ES256 or Ed25519), and :func:`register` verifies it (origin, RP id,
  challenge), spends the grant and keeps its public key under the session's subject, audited
  (``passkey.register``) in the same transaction.
* **A passkey vote**: the challenge *commits to the decision*: ``SHA-256`` of the canonical
  JSON of (request id, saga, step, action digest, decision, nonce). :func:`verify_vote`
  recomputes it from the request as the server holds it *now*, so an assertion made for other
  arguments (another digest), another request or the other decision does not verify; the
  challenge is spent by the first verification (a replayed assertion is refused) and expires
  after five minutes. The verified assertion is kept with its challenge row, and it travels
  with the vote (:func:`verify_vote` returns it as the vote's *proof*: the assertion, the
  challenge's inputs and the approver's registered key, COSE public key and algorithm, RP id
  and origin). The agent writes the key as a ``passkey.registered`` record and the vote with
  its assertion into its own log; its engine checks the assertion again against the arguments
  about to run, and ``certify`` checks it offline (core ``agent_saga.proofs``).

Every challenge and credential lives in the control plane's database (any replica verifies).
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

from agent_saga.proofs import passkey_challenge
from webauthn import (
    generate_authentication_options,
    generate_registration_options,
    options_to_json,
    verify_authentication_response,
    verify_registration_response,
)
from webauthn.helpers import bytes_to_base64url, decode_credential_public_key
from webauthn.helpers.exceptions import WebAuthnException
from webauthn.helpers.structs import (
    AuthenticatorSelectionCriteria,
    PublicKeyCredentialDescriptor,
    ResidentKeyRequirement,
    UserVerificationRequirement,
)

from ..store.approvals import ApprovalRow
from ..store.control import audit
from ..store.db import Database, create_missing_tables
from ..store.tokens import Caller
from .enrolment import EnrolmentRefused, spend_grant
from .enrolment import create_tables as create_enrolment_tables

CHALLENGE_TTL = 300.0
RP_NAME = "agent-saga dashboard"
TABLES = (
    "CREATE TABLE IF NOT EXISTS ui_passkeys (credential_id TEXT PRIMARY KEY, "
    "subject TEXT NOT NULL, public_key TEXT NOT NULL, sign_count BIGINT NOT NULL, "
    "created_at DOUBLE PRECISION NOT NULL)",
    "CREATE TABLE IF NOT EXISTS ui_challenges (id TEXT PRIMARY KEY, subject TEXT NOT NULL, "
    "purpose TEXT NOT NULL, challenge TEXT NOT NULL, request_id TEXT, decision TEXT, "
    "nonce TEXT, expires_at DOUBLE PRECISION NOT NULL, used_at DOUBLE PRECISION, "
    "assertion TEXT)",
)


class PasskeyRefused(Exception):
    """A registration or a passkey vote that does not verify (the message says why)."""


@dataclass(frozen=True)
class Where:
    """The page's origin and relying-party id (its host name: passkeys need a name, not an
    IP address)."""

    origin: str
    rp_id: str


def create_tables(db: Database) -> None:
    """Create the passkey tables (and the enrolment codes') if they are missing."""
    create_missing_tables(db, TABLES)
    create_enrolment_tables(db)


def commitment(request: ApprovalRow, decision: str, nonce: str) -> bytes:
    """What an approval's passkey signs: SHA-256 over the canonical JSON of the request id,
    saga, step, action digest, decision and nonce (the core's :func:`passkey_challenge`, which
    the agent's engine and certify recompute)."""
    return passkey_challenge(
        request.id, request.saga, request.ordinal, request.digest, decision, nonce
    )


@dataclass(frozen=True)
class PasskeyVote:
    """A verified passkey vote: the decision it signed and its proof for the agent's log."""

    decision: str
    proof: dict[str, Any]


def _challenge(
    db: Database, subject: str, purpose: str, challenge: bytes, bound: tuple[Any, ...]
) -> str:
    ident = secrets.token_hex(12)
    with db.transaction() as tx:
        tx.execute(
            "INSERT INTO ui_challenges (id, subject, purpose, challenge, request_id, decision, "
            "nonce, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (ident, subject, purpose, challenge.hex(), *bound, time.time() + CHALLENGE_TTL),
        )
    return ident


def _spend(db: Database, ident: str, subject: str, purpose: str) -> tuple[Any, ...]:
    """Mark a challenge used; its row. Refused when unknown, another's, expired or used."""
    with db.transaction() as tx:
        row = tx.one(
            "SELECT subject, purpose, challenge, request_id, decision, nonce, expires_at, "  # noqa: S608
            "used_at FROM ui_challenges WHERE id = ?" + tx.lock_rows(),
            (ident,),
        )
        if row is None or row[0] != subject or row[1] != purpose:
            raise PasskeyRefused("no such challenge for this session")
        if row[7] is not None:
            raise PasskeyRefused("this challenge was already used (a replayed assertion)")
        if time.time() >= float(row[6]):
            raise PasskeyRefused("the challenge has expired; try again")
        tx.execute("UPDATE ui_challenges SET used_at = ? WHERE id = ?", (time.time(), ident))
    return tuple(row)


def credentials(db: Database, subject: str) -> list[tuple[str, str, int]]:
    """The subject's passkeys: (credential id, public key hex, sign count)."""
    with db.transaction(write=False) as tx:
        rows = tx.all(
            "SELECT credential_id, public_key, sign_count FROM ui_passkeys WHERE subject = ? "
            "ORDER BY created_at",
            (subject,),
        )
    return [(str(c), str(k), int(n)) for c, k, n in rows]


def _descriptors(db: Database, subject: str) -> list[PublicKeyCredentialDescriptor]:
    return [
        PublicKeyCredentialDescriptor(id=bytes.fromhex(c)) for c, _, _ in credentials(db, subject)
    ]


def registration_options(db: Database, where: Where, subject: str, grant: str) -> dict[str, Any]:
    """Options for a new credential of ``subject``; ``grant`` (``code:<id>`` or
    ``passkey:<credential id>``, checked by the caller, see :mod:`.enrolment`) is kept with the
    challenge (in its ``nonce`` column) and checked again when the passkey is stored."""
    options = generate_registration_options(
        rp_id=where.rp_id, rp_name=RP_NAME, user_name=subject,
        user_id=hashlib.sha256(subject.encode()).digest(),
        exclude_credentials=_descriptors(db, subject),
        authenticator_selection=AuthenticatorSelectionCriteria(
            resident_key=ResidentKeyRequirement.PREFERRED,
            user_verification=UserVerificationRequirement.REQUIRED,
        ),
    )  # fmt: skip
    ident = _challenge(db, subject, "register", options.challenge, (None, None, grant))
    return {"challenge_id": ident, "options": json.loads(options_to_json(options))}


def register(
    db: Database, where: Where, actor: Caller, ident: str, credential: Any
) -> tuple[str, str]:
    """Verify a new credential of ``actor.subject`` against its challenge, spend the grant the
    challenge carries and keep the passkey: its id (hex) and that grant.

    The passkey, the spent grant and the ``passkey.register`` audit event are written in one
    transaction: all durable when this returns, none after an exception. A registration that
    fails does not spend an enrolment code (the challenge is spent either way).

    Raises:
        PasskeyRefused: the challenge, the credential or the grant does not verify.
    """
    subject = actor.subject
    row = _spend(db, ident, subject, "register")
    grant = None if row[5] is None else str(row[5])
    if not isinstance(credential, dict):  # the library takes any other value for a parsed one
        raise PasskeyRefused("the passkey did not verify: the credential is not a JSON object")
    try:
        verified = verify_registration_response(
            credential=credential, expected_challenge=bytes.fromhex(row[2]),
            expected_rp_id=where.rp_id, expected_origin=where.origin,
            require_user_verification=True,
        )  # fmt: skip
    except (WebAuthnException, ValueError, KeyError, TypeError) as exc:  # any malformed part
        raise PasskeyRefused(f"the passkey did not verify: {exc}"[:300]) from None
    credential_id = verified.credential_id.hex()
    try:
        with db.transaction() as tx:
            spend_grant(tx, grant, subject, credential_id)
            tx.execute(
                "INSERT INTO ui_passkeys (credential_id, subject, public_key, sign_count, "
                "created_at) VALUES (?, ?, ?, ?, ?)",
                (credential_id, subject, verified.credential_public_key.hex(),
                 verified.sign_count, time.time()),
            )  # fmt: skip
            details = {"subject": subject, "credential": credential_id, "grant": grant}
            audit(tx, actor, "passkey.register", details)
    except EnrolmentRefused as exc:
        raise PasskeyRefused(str(exc)) from None
    return credential_id, str(grant)


def enrol_options(db: Database, where: Where, subject: str) -> dict[str, Any]:
    """Options for an assertion by one of ``subject``'s passkeys that allows registering
    another (a challenge of purpose ``enrol``: random, one-time, five minutes).

    Raises:
        PasskeyRefused: the subject has no passkey (the first needs an enrolment code).
    """
    allowed = _descriptors(db, subject)
    if not allowed:
        raise PasskeyRefused(f"{subject} has no passkey yet: the first needs an enrolment code")
    challenge = secrets.token_bytes(32)
    options = generate_authentication_options(
        rp_id=where.rp_id, challenge=challenge, allow_credentials=allowed,
        user_verification=UserVerificationRequirement.REQUIRED,
    )  # fmt: skip
    ident = _challenge(db, subject, "enrol", challenge, (None, None, None))
    return {"challenge_id": ident, "options": json.loads(options_to_json(options))}


def verify_enrolment(db: Database, where: Where, subject: str, ident: str, credential: Any) -> str:
    """Verify an assertion made for :func:`enrol_options`; the id (hex) of the passkey that
    made it, which becomes the grant of the next registration.

    Raises:
        PasskeyRefused: a spent, expired or other subject's challenge, a credential that is not
            the subject's, or a signature that does not verify.
    """
    row = _spend(db, ident, subject, "enrol")
    credential_id, _ = _assertion(db, where, subject, str(row[2]), credential)
    return credential_id


def vote_options(
    db: Database, where: Where, subject: str, request: ApprovalRow, decision: str
) -> dict[str, Any]:
    """Options for an assertion whose challenge commits to ``decision`` on ``request``.

    Raises:
        PasskeyRefused: the subject has no passkey.
    """
    allowed = _descriptors(db, subject)
    if not allowed:
        raise PasskeyRefused(f"{subject} has no passkey; register one first")
    nonce = secrets.token_hex(16)
    challenge = commitment(request, decision, nonce)
    options = generate_authentication_options(
        rp_id=where.rp_id, challenge=challenge, allow_credentials=allowed,
        user_verification=UserVerificationRequirement.REQUIRED,
    )  # fmt: skip
    ident = _challenge(db, subject, "approve", challenge, (request.id, decision, nonce))
    return {"challenge_id": ident, "options": json.loads(options_to_json(options))}


def verify_vote(
    db: Database, where: Where, subject: str, request: ApprovalRow, ident: str, credential: Any
) -> PasskeyVote:
    """Verify a passkey vote on ``request`` as the server holds it now; the decision it signed
    and its proof (see the module docstring).

    Raises:
        PasskeyRefused: another request, another action digest, a spent or expired challenge,
            a credential that is not the subject's, or a signature that does not verify.
    """
    row = _spend(db, ident, subject, "approve")
    _, _, signed, request_id, decision, nonce, _, _ = row
    if request_id != request.id:
        raise PasskeyRefused("the assertion was made for another approval request")
    if commitment(request, str(decision), str(nonce)).hex() != signed:
        raise PasskeyRefused("the request changed since the passkey was asked (other arguments)")
    _, verified = _assertion(db, where, subject, str(signed), credential)
    with db.transaction() as tx:
        tx.execute(
            "UPDATE ui_challenges SET assertion = ? WHERE id = ?",
            (json.dumps(credential, sort_keys=True), ident),
        )
    inputs = {
        "request": request.id, "saga": request.saga, "step": request.ordinal,
        "digest": request.digest, "decision": str(decision), "nonce": str(nonce),
    }  # fmt: skip
    key = _key(where, subject, verified.credential_id, bytes.fromhex(verified.public_key))
    return PasskeyVote(str(decision), _proof(credential, inputs, key))


@dataclass(frozen=True)
class _Verified:
    credential_id: bytes
    public_key: str


def _assertion(
    db: Database, where: Where, subject: str, signed: str, credential: Any
) -> tuple[str, _Verified]:
    """Verify an assertion of one of ``subject``'s passkeys over the challenge ``signed``
    (hex) and store its new sign count; the credential's id (hex) and key."""
    raw_id = credential.get("rawId") if isinstance(credential, dict) else None
    known = {c: (k, n) for c, k, n in credentials(db, subject)}
    try:
        credential_id = _b64url(str(raw_id)).hex()
    except ValueError:
        raise PasskeyRefused("the assertion names no credential") from None
    if credential_id not in known:
        raise PasskeyRefused(f"the credential is not one of {subject}'s passkeys")
    public_key, count = known[credential_id]
    try:
        verified = verify_authentication_response(
            credential=credential, expected_challenge=bytes.fromhex(signed),
            expected_rp_id=where.rp_id, expected_origin=where.origin,
            credential_public_key=bytes.fromhex(public_key),
            credential_current_sign_count=count, require_user_verification=True,
        )  # fmt: skip
    except (WebAuthnException, ValueError, KeyError, TypeError) as exc:  # any malformed part
        raise PasskeyRefused(f"the passkey assertion did not verify: {exc}"[:300]) from None
    with db.transaction() as tx:
        tx.execute(
            "UPDATE ui_passkeys SET sign_count = ? WHERE credential_id = ?",
            (verified.new_sign_count, credential_id),
        )
    return credential_id, _Verified(verified.credential_id, public_key)


def _key(where: Where, subject: str, credential_id: bytes, public_key: bytes) -> dict[str, Any]:
    """The registered key as the agent's ``passkey.registered`` record states it."""
    alg = int(decode_credential_public_key(public_key).alg)
    return {
        "credential": bytes_to_base64url(credential_id), "approver": subject,
        "public_key": bytes_to_base64url(public_key), "alg": alg, "rp_id": where.rp_id,
        "origin": where.origin,
    }  # fmt: skip


def _proof(credential: Any, inputs: dict[str, Any], key: dict[str, Any]) -> dict[str, Any]:
    response = credential["response"]
    proof: dict[str, Any] = {
        "credential": key["credential"],
        "authenticator_data": str(response["authenticatorData"]),
        "client_data_json": str(response["clientDataJSON"]),
        "signature": str(response["signature"]),
        "challenge": inputs,
        "key": key,
    }
    if isinstance(response.get("userHandle"), str):
        proof["user_handle"] = response["userHandle"]
    return proof


def _b64url(text: str) -> bytes:
    import base64

    if not text or len(text) > 1400:
        raise ValueError("no credential id")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


__all__ = [
    "PasskeyRefused",
    "PasskeyVote",
    "Where",
    "commitment",
    "create_tables",
    "credentials",
    "enrol_options",
    "register",
    "registration_options",
    "verify_enrolment",
    "verify_vote",
    "vote_options",
]
