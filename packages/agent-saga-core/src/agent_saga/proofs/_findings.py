"""certify's checks of one saga and of redaction records, and what a finding is.

A saga's findings depend only on its view (rebuilt from its own records, with the settlement
naming it), the steps approved in it, whether its owner lives (for a running saga) and the
time (for a suspended one): :mod:`._judge` judges each saga of a log from these alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .._history.views import CompensationState, SagaView, StepOutcome
from .._log.records import Record, SagaStatus
from .._log.redaction import REDACTION_KIND

__all__ = [
    "APPROVAL_DECIDED",
    "CRITICAL",
    "WARNING",
    "Finding",
    "approved_steps",
    "redaction_findings",
    "saga_findings",
]

CRITICAL = "CRITICAL"
WARNING = "WARNING"
APPROVAL_DECIDED = "approval.decided"
"""Record kind of a human decision on a step: ``{"ordinal": n, "decision": "approved", ...}``."""


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
