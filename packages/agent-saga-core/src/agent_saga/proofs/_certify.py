"""certify: a signed statement that the log is intact and no effect was left hanging.

Checks, each producing findings:

- the hash chain verifies from the first record (CRITICAL otherwise);
- the log extends the latest checkpoint (CRITICAL: truncated or rewritten; WARNING when there
  is no earlier checkpoint to compare with);
- every saga: a committed COMPENSABLE effect in a saga that did not commit and was not
  compensated, a compensation that failed or never finished, a saga whose owner died and that
  was never recovered, an IRREVERSIBLE step that ran without a recorded approval, a suspended
  saga past its expiry, and any record of a saga logged after its ``saga.end`` (a run that
  outlived its transaction: that effect can never be compensated) are all CRITICAL; a saga
  whose owner is still running, or that is suspended and not yet expired, is a WARNING;
- every passkey vote: its WebAuthn assertion verifies offline with the approver's registered
  key, over the challenge recomputed from the logged request (saga, step, action digest), the
  vote's decision and nonce (:mod:`._passkey_audit`); one that does not, and a registration
  that does not hold, is CRITICAL naming its record; a passkey vote that cannot be checked
  because py_webauthn is missing (the ``agent-saga[passkeys]`` extra) is CRITICAL. The count
  of verified passkey votes is the certificate's ``counts.passkey_votes``, and a WARNING says
  what they rest on (registrations are records of the log: see ``PASSKEY_LIMIT``).

The certificate is JSON: the checkpoint it covers, the findings and the counts, signed with the
home's checkpoint key over its canonical encoding. ``ok`` is true only when nothing is CRITICAL.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

from .._history.build import build_history
from .._log.codec import canonical
from .._log.records import Record, SagaStatus
from .._log.store import VerifyReport
from ._checkpoint import Checkpoint
from ._findings import (
    APPROVAL_DECIDED,
    CRITICAL,
    WARNING,
    Finding,
    approved_steps,
    redaction_findings,
    saga_findings,
)
from ._judge import LogJudge
from ._note import NoteSigner, NoteVerifier
from ._passkey_audit import audit_passkeys

__all__ = [
    "APPROVAL_DECIDED",
    "CRITICAL",
    "WARNING",
    "Finding",
    "approved_steps",
    "certificate",
    "certify_records",
    "redaction_findings",
    "saga_findings",
    "signed",
    "verify_certificate",
]

FORMAT = "agent-saga.certificate/1"
_SIGNED_PREFIX = b"agent-saga certificate v1\n"


def certify_records(
    records: Sequence[Record],
    chain: VerifyReport,
    checkpoint_problem: Finding | None,
    owner_alive: Callable[[str], bool],
    now: float | None = None,
) -> list[Finding]:
    """The findings over a log's records (read and verified by the caller), as
    :class:`._judge.LogJudge` finds them.

    ``now`` (seconds since the epoch; default: the newest record's time) decides whether a
    suspended saga has expired.
    """
    judge = LogJudge(owner_alive, None if now is None else int(now * 1000))
    for record in records:
        judge.add(record)
    judge.finish(lambda: records)
    return judge.findings(chain, checkpoint_problem)


def _counts(records: Sequence[Record], findings: Sequence[Finding]) -> dict[str, int]:
    history = build_history(records)
    counts = {"records": len(records), "sagas": len(history.sagas)}
    for status in SagaStatus:
        counts[status.value] = sum(1 for s in history.sagas if s.status is status)
    counts["passkey_votes"] = audit_passkeys(records).verified
    counts["critical"] = sum(1 for f in findings if f.severity == CRITICAL)
    counts["warning"] = sum(1 for f in findings if f.severity == WARNING)
    return counts


def certificate(
    records: Sequence[Record],
    findings: Sequence[Finding],
    checkpoint: Checkpoint | None,
    signer: NoteSigner,
    issued_at: int,
) -> dict[str, Any]:
    """The signed certificate (a JSON-ready dict)."""
    return signed({"counts": _counts(records, findings)}, findings, checkpoint, signer, issued_at)


def signed(
    fields: Mapping[str, Any],
    findings: Sequence[Finding],
    checkpoint: Checkpoint | None,
    signer: NoteSigner,
    issued_at: int,
) -> dict[str, Any]:
    """A signed certificate of ``findings`` with ``fields`` (its ``counts``, and the ``range``
    of a ``certify --since``) under ``checkpoint``."""
    body: dict[str, Any] = {
        "format": FORMAT,
        "issued_at": issued_at,
        "ok": not any(f.severity == CRITICAL for f in findings),
        "checkpoint": None if checkpoint is None else checkpoint.note,
        **fields,
        "findings": [{k: v for k, v in asdict(f).items() if v is not None} for f in findings],
    }
    signature = signer.sign_bytes(_SIGNED_PREFIX + canonical(body))
    body["signature"] = {
        "key": signer.verifier.encode(),
        "ed25519": base64.b64encode(signature).decode(),
    }
    return body


def verify_certificate(cert: Mapping[str, Any], verifiers: Sequence[NoteVerifier]) -> bool:
    """True when ``cert`` is signed by one of ``verifiers`` and unchanged since."""
    signature = cert.get("signature")
    if not isinstance(signature, dict):
        return False
    body = {k: v for k, v in cert.items() if k != "signature"}
    try:
        raw = base64.b64decode(str(signature.get("ed25519", "")).encode(), validate=True)
        message = _SIGNED_PREFIX + canonical(body)
    except (binascii.Error, ValueError):
        return False
    key = signature.get("key")
    return any(v.encode() == key and v.verify(message, raw) for v in verifiers)
