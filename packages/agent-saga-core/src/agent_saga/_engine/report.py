"""What a rollback did, and the error that hands it to the caller (:class:`SagaRolledBack`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from .._errors import AgentSagaError
from .._log.records import SagaStatus


class StepRef(NamedTuple):
    """A step of a saga: ``(saga_id, ordinal, tool)`` is its identity."""

    ordinal: int
    tool: str
    idempotency_key: str


class CompensationFailure(NamedTuple):
    step: StepRef
    error: str


@dataclass(frozen=True)
class RollbackReport:
    """The outcome of compensating a saga's (or savepoint's) committed steps, newest first."""

    saga_id: str
    status: SagaStatus
    compensated: tuple[StepRef, ...] = ()
    failed: tuple[CompensationFailure, ...] = ()
    nothing_to_undo: tuple[StepRef, ...] = ()
    log_errors: tuple[str, ...] = ()
    unknown: tuple[StepRef, ...] = ()
    """Steps whose tool raised and that have no probe: their effect is assumed not to have
    landed, which nothing checked (a tool with a ``probe`` is asked instead)."""
    interrupted: tuple[StepRef, ...] = ()
    """Compensations stopped by Ctrl-C, exit or cancellation: the saga is left unfinished in the
    log, and ``agent-saga recover`` finishes the rollback once this process is gone."""

    @property
    def ok(self) -> bool:
        """True when every committed effect was compensated and every record was written."""
        return not self.failed and not self.log_errors

    def summary(self) -> str:
        parts = [f"status {self.status.value}", f"{len(self.compensated)} compensated"]
        if self.failed:
            names = ", ".join(f"#{f.step.ordinal} {f.step.tool}" for f in self.failed)
            parts.append(f"{len(self.failed)} compensation(s) failed ({names})")
        if self.log_errors:
            parts.append(f"{len(self.log_errors)} log write(s) failed")
        if self.unknown:
            names = ", ".join(f"#{s.ordinal} {s.tool}" for s in self.unknown)
            parts.append(f"{len(self.unknown)} raised step(s) without a probe ({names})")
        if self.interrupted:
            parts.append("interrupted: left unfinished for recovery")
        return "; ".join(parts)

    def merged(self, inner: RollbackReport) -> RollbackReport:
        """This report extended by an inner savepoint's report (the inner one ran first)."""
        status = self.status
        if inner.status is SagaStatus.NEEDS_HUMAN:
            status = SagaStatus.NEEDS_HUMAN
        return RollbackReport(
            self.saga_id,
            status,
            inner.compensated + self.compensated,
            inner.failed + self.failed,
            inner.nothing_to_undo + self.nothing_to_undo,
            inner.log_errors + self.log_errors,
            inner.unknown + self.unknown,
            inner.interrupted + self.interrupted,
        )


class SagaRolledBack(AgentSagaError):
    """A transaction failed and its committed steps were compensated (or tried to be).

    Attributes:
        saga_id: the failed saga.
        cause: the exception that made the transaction fail.
        report: what was compensated, what failed, and the saga's final status.
    """

    def __init__(self, saga_id: str, cause: BaseException, report: RollbackReport) -> None:
        super().__init__(
            f"saga {saga_id} rolled back after {type(cause).__name__}: {cause}; {report.summary()}"
        )
        self.saga_id = saga_id
        self.cause = cause
        self.report = report
