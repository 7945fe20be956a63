"""Passkey (WebAuthn) approvals, checked offline: the challenge, the key registry, the check.

A passkey vote is an ``approval.vote`` record whose ``passkey`` field holds a WebAuthn assertion
(credential id, authenticator data, client data JSON, signature; base64url, as browsers send
them) and the inputs of its challenge: ``challenge = SHA-256(canonical JSON of request id,
saga, step, action digest, decision, nonce)`` (:func:`passkey_challenge`). The approver's key is
a ``passkey.registered`` record of the same log (approver, credential id, COSE public key, its
algorithm, the relying-party id and origin it was made for); a ``passkey.revoked`` record ends
it. Both are plain records: whoever can write the log can register a passkey, so a passkey vote
proves that the holder of a *registered* passkey signed this exact decision on this exact
action, and the registrations are what an auditor compares with the approvers' real keys.

:func:`check_passkey` is the one check, used by the waiting engine before it counts a vote, by
``submit_vote`` before it logs one, and by certify over every passkey vote of a log. It
verifies the assertion with py_webauthn (``verify_authentication_response``), imported on first
use: without the ``agent-saga[passkeys]`` extra the check answers :data:`EXTRA_MISSING` (such a
vote never counts and certify fails), never a silent pass.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._log.codec import JSONValue
from .._log.records import Record

__all__ = [
    "EXTRA_MISSING",
    "PASSKEY_REGISTERED",
    "PASSKEY_REVOKED",
    "PasskeyKey",
    "PasskeyRegistry",
    "check_passkey",
    "passkey_challenge",
    "passkey_evidence",
    "webauthn_available",
]

PASSKEY_REGISTERED = "passkey.registered"
PASSKEY_REVOKED = "passkey.revoked"
EXTRA_MISSING = (
    "a passkey vote cannot be checked: py_webauthn is missing; "
    "install the extra: pip install 'agent-saga[passkeys]'"
)
ALGORITHMS = {-7: "ES256", -8: "EdDSA", -257: "RS256"}
"""COSE algorithms a registered passkey may use."""
_MAX_FIELD = 8192
_ASSERTION_FIELDS = ("credential", "authenticator_data", "client_data_json", "signature")
_CHALLENGE_FIELDS = ("request", "saga", "step", "digest", "decision", "nonce")

PASSKEY_LIMIT = (
    "passkey approvals rest on the passkey.registered records of the log: a passkey vote "
    "proves that the holder of a registered passkey signed this decision on these exact "
    "arguments; the control plane registers a passkey only with an administrator's one-time "
    "enrolment code or an assertion by one of the approver's passkeys (an approver's token "
    "alone is not enough), but whoever can write the log or the control plane's database, or "
    "holds an administrator's token, can register a passkey for any approver; an auditor "
    "compares the registered keys with the approvers' own"
)
"""What a verified passkey vote rests on (the manifest's limit, and a certify warning)."""


def passkey_challenge(
    request: str, saga: str, step: int, digest: str, decision: str, nonce: str
) -> bytes:
    """The challenge a passkey signs for ``decision`` on one approval request: SHA-256 over the
    canonical JSON (sorted keys, no spaces) of the request id, saga, step ordinal, action
    digest, decision and nonce. The dashboard asks the authenticator for exactly these bytes."""
    bound = {
        "request": request, "saga": saga, "step": step,
        "digest": digest, "decision": decision, "nonce": nonce,
    }  # fmt: skip
    text = json.dumps(bound, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).digest()


def passkey_evidence(value: object) -> dict[str, Any]:
    """The fields of a passkey vote's evidence that :func:`check_passkey` reads (the assertion,
    ``user_handle`` and the challenge's six inputs), and nothing else, so what a vote logs is
    bounded by what is checked; ``{}`` (a malformed assertion) when ``value`` is no mapping."""
    if not isinstance(value, Mapping):
        return {}
    kept = {k: value[k] for k in (*_ASSERTION_FIELDS, "user_handle") if k in value}
    inputs = value.get("challenge")
    if isinstance(inputs, Mapping):
        kept["challenge"] = {k: inputs[k] for k in _CHALLENGE_FIELDS if k in inputs}
    return kept


def webauthn_available() -> bool:
    """Whether py_webauthn (the ``agent-saga[passkeys]`` extra) can be imported."""
    try:
        import webauthn  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass(frozen=True)
class PasskeyKey:
    """One registered passkey, as its ``passkey.registered`` record states it."""

    credential: str
    """The credential id, base64url without padding (as WebAuthn's ``id``)."""
    approver: str
    public_key: str
    """The COSE public key, base64url."""
    alg: int
    rp_id: str
    origin: str
    seq: int = 0
    """The registration record's sequence number (0 when not from a log)."""

    def to_data(self) -> dict[str, JSONValue]:
        return {
            "credential": self.credential, "approver": self.approver,
            "public_key": self.public_key, "alg": self.alg, "rp_id": self.rp_id,
            "origin": self.origin,
        }  # fmt: skip

    @classmethod
    def from_data(cls, data: Mapping[str, Any], seq: int = 0) -> PasskeyKey | None:
        texts = [data.get(k) for k in ("credential", "approver", "public_key", "rp_id", "origin")]
        alg = data.get("alg")
        if not all(isinstance(t, str) and 0 < len(t) <= _MAX_FIELD for t in texts):
            return None
        if type(alg) is not int:
            return None
        credential, approver, public_key, rp_id, origin = (str(t) for t in texts)
        return cls(credential, approver, public_key, alg, rp_id, origin, seq)


@dataclass
class PasskeyRegistry:
    """The passkeys a log has registered so far (credential id -> key), revocations applied.

    The first registration of a credential id holds; a later one of another key for the same id
    is listed in :attr:`refused` and changes nothing (a key cannot be swapped under a
    credential); the same key again (two processes registering it at once) changes nothing.
    """

    keys: dict[str, PasskeyKey] = field(default_factory=dict)
    revoked: dict[str, int] = field(default_factory=dict)
    """Credential id -> the seq of the record that revoked it."""
    refused: list[tuple[int, str]] = field(default_factory=list)

    def take(self, record: Record) -> None:
        """Apply one ``passkey.registered`` / ``passkey.revoked`` record (others: nothing)."""
        if record.kind == PASSKEY_REGISTERED:
            key = PasskeyKey.from_data(record.data, record.seq)
            if key is None:
                self.refused.append((record.seq, "a malformed passkey registration"))
            elif key.credential in self.keys:
                if self.keys[key.credential].to_data() != key.to_data():
                    self.refused.append((record.seq, "another key has this credential"))
            else:
                self.keys[key.credential] = key
        elif record.kind == PASSKEY_REVOKED:
            credential = record.data.get("credential")
            if isinstance(credential, str) and credential in self.keys:
                self.revoked.setdefault(credential, record.seq)

    def copy(self) -> PasskeyRegistry:
        """An independent copy: taking records into it leaves this registry as it is."""
        return PasskeyRegistry(dict(self.keys), dict(self.revoked), list(self.refused))

    def find(self, credential: str) -> PasskeyKey | None:
        """The registered, unrevoked key of ``credential``."""
        key = self.keys.get(credential)
        return None if key is None or credential in self.revoked else key


@dataclass(frozen=True)
class Expected:
    """What a passkey vote must have signed: the request as logged, the digest of the arguments
    about to run (or, offline, as requested), the vote's decision and approver."""

    request: str
    saga: str
    step: int
    digest: str
    decision: str
    approver: str
    nonce: str | None


def _bound_mismatch(inputs: Mapping[str, Any], expected: Expected) -> str | None:
    checks = (
        ("request", expected.request, "another approval request"),
        ("saga", expected.saga, "another saga"),
        ("step", expected.step, "another step"),
        ("digest", expected.digest, "another action digest (other arguments)"),
        ("decision", expected.decision, "the other decision"),
    )
    for name, value, what in checks:
        if inputs.get(name) != value:
            return f"the passkey signed {what}"
    nonce = inputs.get("nonce")
    if not isinstance(nonce, str) or not nonce or len(nonce) > 200:
        return "the passkey vote has no nonce"
    if expected.nonce is not None and nonce != expected.nonce:
        return "the passkey vote's nonce is not the one it signed"
    return None


def check_passkey(
    evidence: Mapping[str, Any], expected: Expected, registry: PasskeyRegistry
) -> str | None:
    """Why a passkey vote does not count (``None``: it verifies).

    Checks, in order: the evidence's shape; that its challenge inputs are ``expected`` (the
    request, saga, step, action digest and decision; a vote for other arguments, another step or
    the other decision fails here); that the credential is registered, unrevoked and the
    approver's; that the registered key is of its stated algorithm; and the assertion itself
    with py_webauthn against the recomputed challenge, the registration's RP id and origin,
    with user verification required.
    """
    inputs = evidence.get("challenge")
    texts = [evidence.get(k) for k in _ASSERTION_FIELDS]
    if not isinstance(inputs, dict) or not all(
        isinstance(t, str) and 0 < len(t) <= _MAX_FIELD for t in texts
    ):
        return "a malformed passkey assertion"
    problem = _bound_mismatch(inputs, expected)
    if problem is not None:
        return problem
    credential, authenticator_data, client_data_json, signature = (str(t) for t in texts)
    key = registry.keys.get(credential)
    if key is None:
        return "the passkey is not registered in this log"
    if credential in registry.revoked:
        return f"the passkey was revoked (record {registry.revoked[credential]})"
    if key.approver != expected.approver:
        return f"the passkey is {key.approver}'s, not {expected.approver}'s"
    try:
        from webauthn import verify_authentication_response
        from webauthn.helpers import base64url_to_bytes, decode_credential_public_key
        from webauthn.helpers.exceptions import WebAuthnException
    except ImportError:
        return EXTRA_MISSING
    response: dict[str, Any] = {
        "authenticatorData": authenticator_data,
        "clientDataJSON": client_data_json,
        "signature": signature,
    }
    handle = evidence.get("user_handle")
    if isinstance(handle, str) and 0 < len(handle) <= _MAX_FIELD:
        response["userHandle"] = handle
    assertion = {"id": credential, "rawId": credential, "type": "public-key", "response": response}
    challenge = passkey_challenge(
        expected.request, expected.saga, expected.step, expected.digest, expected.decision,
        str(inputs["nonce"]),
    )  # fmt: skip
    try:
        public_key = base64url_to_bytes(key.public_key)
        alg = int(decode_credential_public_key(public_key).alg)
        if alg != key.alg or alg not in ALGORITHMS:
            return f"the registered key (record {key.seq}) is not of its stated algorithm"
        verify_authentication_response(
            credential=assertion, expected_challenge=challenge, expected_rp_id=key.rp_id,
            expected_origin=key.origin, credential_public_key=public_key,
            credential_current_sign_count=0, require_user_verification=True,
        )  # fmt: skip
    except (WebAuthnException, ValueError, TypeError, KeyError, IndexError) as exc:
        return f"the passkey assertion does not verify: {exc}"[:300]
    return None
