"""Approvals as data: requests, votes and decisions are records; their state is a fold of the log.

A request is bound to one step of one saga and to an *action digest*: SHA-256 over the canonical
tool name, semantics and arguments. It expires (then it is denied), needs ``quorum`` distinct
allowed approvers, and is decided once. Every signal is a record of the saga:

- ``approval.requested``: the request (id, step, digest, arguments with redacted fields masked,
  allowed approvers, quorum, expiry);
- ``approval.vote``: one approver's approve or deny, optionally Ed25519-signed or carrying a
  passkey (WebAuthn) assertion over (request, saga, step, digest, decision, nonce), checked
  with the approver's ``passkey.registered`` key (:mod:`agent_saga.proofs._passkey`);
- ``approval.refused``: an attempt that changed nothing (not allowed, expired, decided, bad
  signature, replayed nonce, another digest), kept so that it shows in ``replay``;
- ``approval.decided``: the outcome, written by the waiting agent (``approved``, ``denied`` or
  ``expired``); certify reads it.

Approver keys are records too (``approver.key_added`` / ``approver.key_revoked``), so adding or
revoking a key is itself tamper-evident, and such a record counts only when a trusted
administrator key or the approver's current key signed it (see :mod:`.keys`). Votes are
re-checked by the agent when it counts them: a vote record only counts if its approver is
allowed and, when signed, the signature verifies against a key registered with authority and
not revoked, over this request's digest, with a fresh nonce; a passkey vote's assertion must
verify against the recomputed challenge and a registered, unrevoked passkey of its approver.

An *unsigned* vote (``Approvals(require_signature=False)``, the default) names its approver but
proves nothing: any process that can write the log can append one. Unsigned approvals rest on
the file permissions of the home (or the PostgreSQL role's grants); use signed votes where a
forged approval would cost money.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .._log.codec import JSONValue, canonical
from .._log.records import Kind, Record
from ..proofs._passkey import PASSKEY_REGISTERED, PASSKEY_REVOKED, Expected, check_passkey
from .keys import ApproverKeys

REQUESTED = Kind.APPROVAL_REQUESTED
VOTE = Kind.APPROVAL_VOTE
REFUSED = Kind.APPROVAL_REFUSED
DECIDED = Kind.APPROVAL_DECIDED
KEY_ADDED = Kind.KEY_ADDED
KEY_REVOKED = Kind.KEY_REVOKED
APPROVAL_KINDS = frozenset({REQUESTED, VOTE, REFUSED, DECIDED})
_ACTION_PREFIX = b"agent-saga action v1\x00"
_SIGNED_PREFIX = b"agent-saga approval v1\x00"


def action_digest(tool: str, semantics: str, args: JSONValue) -> str:
    """What an approval is bound to: the exact call (hex SHA-256 of its canonical form)."""
    body = canonical({"tool": tool, "semantics": semantics, "args": args})
    return hashlib.sha256(_ACTION_PREFIX + body).hexdigest()


def signing_message(
    request_id: str, saga: str, ordinal: int, digest: str, nonce: str, approver: str
) -> bytes:
    """The bytes an approver's key signs: the request, its step, its action and a nonce."""
    fields = {
        "approver": approver,
        "digest": digest,
        "nonce": nonce,
        "ordinal": ordinal,
        "request": request_id,
        "saga": saga,
    }
    return _SIGNED_PREFIX + canonical(fields)


@dataclass(frozen=True)
class ApprovalRequest:
    """One pending human decision on one step."""

    id: str
    saga: str
    ordinal: int
    tool: str
    semantics: str
    digest: str
    args: JSONValue
    rule: str
    reason: str
    approvers: tuple[str, ...]
    quorum: int
    requested_at: float
    expires_at: float

    def to_data(self) -> dict[str, JSONValue]:
        return {
            "request": self.id,
            "ordinal": self.ordinal,
            "tool": self.tool,
            "semantics": self.semantics,
            "digest": self.digest,
            "args": self.args,
            "rule": self.rule,
            "reason": self.reason,
            "approvers": list(self.approvers),
            "quorum": self.quorum,
            "requested_at": self.requested_at,
            "expires_at": self.expires_at,
        }

    @classmethod
    def from_record(cls, record: Record) -> ApprovalRequest | None:
        data = record.data
        try:
            approvers = data["approvers"]
            if record.saga is None or not isinstance(approvers, list):
                return None
            return cls(
                id=str(data["request"]),
                saga=record.saga,
                ordinal=int(data["ordinal"]),  # type: ignore[arg-type]
                tool=str(data["tool"]),
                semantics=str(data["semantics"]),
                digest=str(data["digest"]),
                args=data.get("args"),
                rule=str(data.get("rule", "")),
                reason=str(data.get("reason", "")),
                approvers=tuple(str(a) for a in approvers),
                quorum=int(data["quorum"]),  # type: ignore[arg-type]
                requested_at=float(data["requested_at"]),  # type: ignore[arg-type]
                expires_at=float(data["expires_at"]),  # type: ignore[arg-type]
            )
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class Vote:
    """One approver's signal on one request, as logged."""

    request: str
    approver: str
    decision: str
    note: str
    channel: str
    at: float
    signature: str | None = None
    nonce: str | None = None
    key: str | None = None
    passkey: Mapping[str, Any] | None = None
    """A WebAuthn assertion and its challenge's inputs (see :mod:`agent_saga.proofs._passkey`)."""
    replayed: bool = False
    """Its nonce was used by an earlier vote of the log."""


def decode_signature(text: str) -> bytes | None:
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        return None
    return raw if len(raw) == 64 else None


@dataclass
class ApprovalBook:
    """Every request, vote, decision and approver key found in a log."""

    requests: dict[str, ApprovalRequest] = field(default_factory=dict)
    votes: dict[str, list[Vote]] = field(default_factory=dict)
    decided: dict[str, str] = field(default_factory=dict)
    ended_sagas: set[str] = field(default_factory=set)
    used_nonces: set[str] = field(default_factory=set)
    keys: ApproverKeys = field(default_factory=ApproverKeys)

    def take(self, record: Record) -> None:
        kind, data = record.kind, record.data
        if record.seq == 1:
            self.keys.log = record.hash  # what key records are bound to
        if kind == REQUESTED:
            request = ApprovalRequest.from_record(record)
            if request is not None:
                self.requests[request.id] = request
        elif kind == VOTE:
            vote = _vote(data)
            if vote is not None:
                if vote.nonce and vote.nonce in self.used_nonces:
                    vote = replace(vote, replayed=True)
                self.votes.setdefault(vote.request, []).append(vote)
                if vote.nonce:
                    self.used_nonces.add(vote.nonce)
        elif kind == DECIDED:
            self.decided[str(data.get("request"))] = str(data.get("decision"))
        elif kind == "saga.end" and record.saga is not None:
            self.ended_sagas.add(record.saga)
        elif kind in (KEY_ADDED, KEY_REVOKED):
            self.keys.take(record)
        elif kind in (PASSKEY_REGISTERED, PASSKEY_REVOKED):
            self.keys.passkeys.take(record)

    def for_one_request(self) -> ApprovalBook:
        """A book that goes on from this one for a request made after everything it holds:
        a copy of its keys and used vote nonces (what checking a later vote needs), none of its
        requests, votes or decisions."""
        return ApprovalBook(used_nonces=set(self.used_nonces), keys=self.keys.copy())

    def take_all(self, records: Iterable[Record]) -> ApprovalBook:
        for record in records:
            self.take(record)
        return self

    def pending(self, now: float) -> list[ApprovalRequest]:
        """Requests a human can still decide: undecided, unexpired, in a saga still running."""
        return [
            r
            for r in self.requests.values()
            if r.id not in self.decided and r.expires_at > now and r.saga not in self.ended_sagas
        ]

    def find(self, id_or_prefix: str) -> ApprovalRequest | None:
        if id_or_prefix in self.requests:
            return self.requests[id_or_prefix]
        found = [r for key, r in self.requests.items() if key.startswith(id_or_prefix)]
        return found[0] if len(found) == 1 and id_or_prefix else None


def _vote(data: Mapping[str, Any]) -> Vote | None:
    try:
        return Vote(
            request=str(data["request"]),
            approver=str(data["by"]),
            decision=str(data["decision"]),
            note=str(data.get("note", "")),
            channel=str(data.get("channel", "")),
            at=float(data.get("at", 0.0)),
            signature=data.get("signature") if isinstance(data.get("signature"), str) else None,
            nonce=data.get("nonce") if isinstance(data.get("nonce"), str) else None,
            key=data.get("key") if isinstance(data.get("key"), str) else None,
            passkey=data.get("passkey") if isinstance(data.get("passkey"), dict) else None,
        )
    except (KeyError, TypeError, ValueError):
        return None


def check_vote(vote: Vote, request: ApprovalRequest, keys: ApproverKeys, digest: str) -> str | None:
    """Why ``vote`` does not count for ``request`` executed with ``digest`` (``None``: it does).

    ``digest`` is recomputed by the caller from the arguments about to run, so a signature
    over other arguments, another step or another saga never counts.
    """
    if vote.decision not in ("approve", "deny"):
        return f"unknown decision {vote.decision!r}"
    if vote.approver not in request.approvers:
        return f"{vote.approver} may not approve this request"
    if vote.at >= request.expires_at:
        return "the request had expired"
    if vote.replayed:
        return "replayed: its nonce was used by an earlier vote"
    if vote.passkey is not None:
        if vote.signature is not None:
            return "a vote carries one proof: a signature or a passkey, not both"
        expected = Expected(
            request.id, request.saga, request.ordinal, digest, vote.decision, vote.approver,
            vote.nonce,
        )  # fmt: skip
        problem = check_passkey(vote.passkey, expected, keys.passkeys)
        if problem is None and vote.nonce is None:  # as certify: replays are known by it
            return "the passkey vote has no nonce"
        return problem
    if vote.signature is None:
        return None
    raw = decode_signature(vote.signature)
    if raw is None or vote.nonce is None:
        return "malformed signature"
    message = signing_message(
        request.id, request.saga, request.ordinal, digest, vote.nonce, vote.approver
    )
    if not any(v.verify(message, raw) for v in keys.active(vote.approver)):
        return "the signature does not verify with a registered, unrevoked key of the approver"
    return None
