"""certify's passkey check: every passkey vote of a log, verified offline with its registered key.

The log is read in order, as the engine read it: ``passkey.registered`` / ``passkey.revoked``
records build the registry, ``approval.requested`` records the requests (saga, step, action
digest as the engine computed it from the arguments), and each ``approval.vote`` that carries a
passkey is checked with :func:`~agent_saga.proofs._passkey.check_passkey` against the registry
*at that point of the log*. A vote that does not verify (a tampered assertion, a key changed
under it, a vote for another request, step or digest, a replayed nonce, a revoked or unknown
credential) and a registration that does not hold (malformed, or a second key under a
credential id) are problems naming their record. Without py_webauthn the audit says so once
(:data:`~agent_saga.proofs._passkey.EXTRA_MISSING`) and verifies nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .._log.records import Record
from ._passkey import (
    EXTRA_MISSING,
    PASSKEY_REGISTERED,
    Expected,
    PasskeyRegistry,
    check_passkey,
)

__all__ = ["PasskeyAudit", "PasskeyAuditor", "audit_passkeys"]

_REQUESTED = "approval.requested"
_VOTE = "approval.vote"


@dataclass
class PasskeyAudit:
    """What :func:`audit_passkeys` found."""

    verified: int = 0
    """Passkey votes whose assertion verifies with their registered key."""
    problems: list[tuple[int, str]] = field(default_factory=list)
    """``(seq, message)`` of each record that does not hold."""
    unverifiable: bool = False
    """A passkey vote is present but py_webauthn is missing."""


def audit_passkeys(records: Iterable[Record]) -> PasskeyAudit:
    """Check every passkey vote and registration in ``records`` (in log order)."""
    auditor = PasskeyAuditor()
    for record in records:
        auditor.take(record)
    return auditor.audit


class PasskeyAuditor:
    """:func:`audit_passkeys` one record at a time, for a pass that keeps no record: it holds
    the registry, the approval requests and the vote nonces seen so far (what a vote is checked
    against), nothing else."""

    def __init__(self) -> None:
        self.audit = PasskeyAudit()
        self.registry = PasskeyRegistry()
        self.requests: dict[str, tuple[str, int, str]] = {}
        self.nonces: set[str] = set()

    def take(self, record: Record) -> None:
        """Check ``record``, the next of the log, against what came before it."""
        data, audit, registry = record.data, self.audit, self.registry
        if record.kind in (PASSKEY_REGISTERED, "passkey.revoked"):
            before = len(registry.refused)
            registry.take(record)
            for seq, why in registry.refused[before:]:
                audit.problems.append((seq, f"passkey registration (record {seq}): {why}"))
        elif record.kind == _REQUESTED and record.saga is not None:
            ordinal, digest = data.get("ordinal"), data.get("digest")
            if type(ordinal) is int and isinstance(digest, str):
                self.requests[str(data.get("request"))] = (record.saga, ordinal, digest)
        elif record.kind == _VOTE:
            nonce = data.get("nonce")
            passkey = data.get("passkey")
            if isinstance(passkey, dict):
                problem = _vote_problem(record, passkey, self.requests, registry, self.nonces)
                if problem == EXTRA_MISSING:
                    audit.unverifiable = True
                elif problem is not None:
                    who = data.get("by")
                    audit.problems.append(
                        (record.seq, f"passkey vote (record {record.seq}) by {who}: {problem}")
                    )
                else:
                    audit.verified += 1
            if isinstance(nonce, str) and nonce:
                self.nonces.add(nonce)


def _vote_problem(
    record: Record,
    passkey: Mapping[str, object],
    requests: dict[str, tuple[str, int, str]],
    registry: PasskeyRegistry,
    nonces: set[str],
) -> str | None:
    data = record.data
    request_id = str(data.get("request"))
    found = requests.get(request_id)
    if found is None:
        return f"its request {request_id} is not in the log before it"
    nonce = data.get("nonce")
    if not isinstance(nonce, str) or not nonce:
        return "the vote has no nonce"
    if nonce in nonces:
        return "replayed: its nonce was used by an earlier vote"
    saga, ordinal, digest = found
    expected = Expected(
        request_id, saga, ordinal, digest, str(data.get("decision")), str(data.get("by")), nonce
    )
    return check_passkey(passkey, expected, registry)
