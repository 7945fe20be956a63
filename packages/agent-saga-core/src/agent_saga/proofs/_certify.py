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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from .._history.build import build_history
from .._history.views import CompensationState, SagaView, StepOutcome
from .._log.codec import canonical
from .._log.records import Record, SagaStatus
from .._log.redaction import REDACTION_KIND
from .._log.store import VerifyReport
from ._checkpoint import Checkpoint
from ._note import NoteSigner, NoteVerifier
from ._passkey import EXTRA_MISSING, PASSKEY_LIMIT
from ._passkey_audit import audit_passkeys

__all__ = [
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
CRITICAL = "CRITICAL"
WARNING = "WARNING"
APPROVAL_DECIDED = "approval.decided"
"""Record kind of a human decision on a step: ``{"ordinal": n, "decision": "approved", ...}``."""
_SIGNED_PREFIX = b"agent-saga certificate v1\n"


@dataclass(frozen=True)
class Finding:
    """One problem certify found."""

    severity: str
    check: str
    message: str
    saga: str | None = None
    ordinal: int | None = None
    tool: str | None = None


def approved_steps(records: Sequence[Record]) -> dict[str, set[int]]:
    approved: dict[str, set[int]] = {}
    for record in records:
        if record.kind == APPROVAL_DECIDED and record.saga is not None:
            ordinal = record.data.get("ordinal")
            if record.data.get("decision") == "approved" and type(ordinal) is int:
                approved.setdefault(record.saga, set()).add(ordinal)
    return approved


def saga_findings(
    saga: SagaView, approved: set[int], owner_alive: bool | None, now_ms: int
) -> list[Finding]:
    findings: list[Finding] = []

    def add(severity: str, check: str, message: str, step: Any = None) -> None:
        ordinal = None if step is None else step.ordinal
        tool = None if step is None else step.tool
        findings.append(Finding(severity, check, message, saga.id, ordinal, tool))

    if saga.status is SagaStatus.RUNNING:
        if owner_alive:
            add(WARNING, "in_progress", f"saga {saga.name!r} is still running in a live process")
        else:
            add(CRITICAL, "unrecovered", f"saga {saga.name!r} crashed and was never recovered")
    waiting = saga.status is SagaStatus.SUSPENDED and (
        saga.expires_at is None or now_ms < saga.expires_at
    )
    if waiting:
        add(WARNING, "suspended", f"saga {saga.name!r} is suspended, waiting to be resumed")
    elif saga.status is SagaStatus.SUSPENDED:
        add(CRITICAL, "suspension_expired", f"saga {saga.name!r} expired and was not recovered")
    if saga.after_end:
        seqs = ", ".join(map(str, saga.after_end[:10]))
        add(
            CRITICAL,
            "after_end",
            f"{len(saga.after_end)} record(s) of saga {saga.name!r} were logged after its end "
            f"(seq {seqs}): a run outlived its transaction",
        )
    # A saga still running in a live process, or suspended and waiting, has not finished: its
    # effects are not outstanding.
    settled = saga.status is SagaStatus.COMMITTED or bool(owner_alive) or waiting
    for step in saga.steps:
        ran = step.outcome in (StepOutcome.DONE, StepOutcome.UNKNOWN)
        state = step.compensation_state
        if state is CompensationState.FAILED:
            add(CRITICAL, "compensation_failed", f"compensating {step.tool} failed", step)
        elif state is CompensationState.STARTED:
            add(
                CRITICAL,
                "compensation_unfinished",
                f"compensating {step.tool} never finished",
                step,
            )
        elif (
            ran
            and not settled
            and step.semantics == "compensable"
            and state is not CompensationState.COMPENSATED
        ):
            add(
                CRITICAL,
                "uncompensated_effect",
                f"{step.tool} took effect in a saga that did not commit and was not compensated",
                step,
            )
        if ran and step.semantics == "irreversible" and step.ordinal not in approved:
            add(CRITICAL, "unapproved_irreversible", f"{step.tool} ran without an approval", step)
    if saga.settled is not None:  # a human took it on: still shown, no longer critical
        findings = [
            replace(f, severity=WARNING, message=f"{f.message}; settled by {saga.settled}")
            if f.severity == CRITICAL
            else f
            for f in findings
        ]
    return findings


def redaction_findings(records: Iterable[Record]) -> list[Finding]:
    """A WARNING for each record a ``log.redaction`` among ``records`` masked."""
    findings = []
    for record in records:
        if record.kind == REDACTION_KIND:
            entries = record.data.get("records")
            for entry in entries if isinstance(entries, list) else []:
                seq = entry.get("seq") if isinstance(entry, dict) else None
                message = (
                    f"record {seq} was masked after it was written (redaction record "
                    f"{record.seq}); its remaining content rests on that record"
                )
                findings.append(Finding(WARNING, "redacted", message))
    return findings


def certify_records(
    records: Sequence[Record],
    chain: VerifyReport,
    checkpoint_problem: Finding | None,
    owner_alive: Callable[[str], bool],
    now: float | None = None,
) -> list[Finding]:
    """The findings over a log's records (read and verified by the caller).

    ``now`` (seconds since the epoch; default: the newest record's time) decides whether a
    suspended saga has expired.
    """
    findings: list[Finding] = []
    if not chain.ok:
        findings.append(Finding(CRITICAL, "chain", f"the hash chain is broken: {chain.error}"))
    if checkpoint_problem is not None:
        findings.append(checkpoint_problem)
    findings += redaction_findings(records)
    passkeys = audit_passkeys(records)
    if passkeys.unverifiable:
        findings.append(Finding(CRITICAL, "passkey_unverifiable", EXTRA_MISSING))
    for _, message in passkeys.problems:
        findings.append(Finding(CRITICAL, "passkey", message))
    if passkeys.verified:
        message = f"{passkeys.verified} passkey vote(s) verified; {PASSKEY_LIMIT}"
        findings.append(Finding(WARNING, "passkey_registrations", message))
    history = build_history(records)
    approved = approved_steps(records)
    now_ms = int(now * 1000) if now is not None else max((r.ts for r in records), default=0)
    for saga in history.sagas:
        alive = None
        if saga.status is SagaStatus.RUNNING and saga.owner is not None:
            alive = owner_alive(saga.owner)
        findings.extend(saga_findings(saga, approved.get(saga.id, set()), alive, now_ms))
    return findings


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
