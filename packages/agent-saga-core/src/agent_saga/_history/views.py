"""Read-only views of sagas, as rebuilt from their records by :mod:`agent_saga._history.build`."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .._errors import AgentSagaError
from .._log.codec import JSONValue
from .._log.records import SagaStatus


class StepOutcome(enum.StrEnum):
    """What happened to a step's effect, as far as the log knows."""

    DONE = "done"
    """The tool returned; its result is logged."""
    FAILED = "failed"
    """The tool raised; the engine treats the step as having had no effect."""
    REFUSED = "refused"
    """The gate (or kill switch) refused the call; the tool never ran."""
    UNKNOWN = "unknown"
    """The intent is logged but no outcome: the process may have died during the call."""


class CompensationState(enum.StrEnum):
    """Where undoing a step stands."""

    NOT_NEEDED = "not_needed"
    """Nothing to undo: the step did not take effect, is REVERSIBLE without a compensation, or
    its saga committed."""
    PENDING = "pending"
    """A committed effect with a declared compensation that has not run, in a saga that has not
    committed (still running, abandoned, or a rollback that never reached this step)."""
    STARTED = "started"
    """The compensation's intent is logged but not its outcome."""
    COMPENSATED = "compensated"
    FAILED = "failed"
    """The compensation raised (or could not be found); a human must look."""
    NONE_DECLARED = "none_declared"
    """A committed non-REVERSIBLE effect with no compensation declared: nothing can undo it."""


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """An exception as the engine logged it (``{"type": ..., "message": ...}``)."""

    type: str
    message: str

    def __str__(self) -> str:
        return f"{self.type}: {self.message}" if self.message else self.type


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why the gate refused a call: the deciding rule and its reason."""

    rule: str
    reason: str


@dataclass(frozen=True, slots=True)
class StepView:
    """One step of a saga, identified by ``(saga_id, ordinal, tool)``.

    ``semantics``, ``idempotency_key`` and ``compensation`` come from the step's intent record.
    A call refused before its intent has no key; its ``semantics`` and ``compensation`` come
    from its ``gate.refused`` record (``None`` in logs written before refusals carried them).
    """

    ordinal: int
    tool: str
    outcome: StepOutcome
    args: JSONValue = None
    semantics: str | None = None
    idempotency_key: str | None = None
    compensation: str | None = None
    """The declared compensation: a registered name, or ``callable module.qualname``."""
    compensation_recoverable: bool | None = None
    result: JSONValue = None
    error: ErrorInfo | None = None
    refusal: Refusal | None = None
    compensation_state: CompensationState = CompensationState.NOT_NEEDED
    compensation_error: ErrorInfo | None = None
    ts: int | None = None
    """When the step was first logged (milliseconds since the epoch)."""
    approval: str | None = None
    probe: str | None = None
    """What the tool's probe answered after the tool raised or the process died: ``landed``,
    ``not_landed`` or ``cannot_tell`` (``None``: never asked)."""
    """Where a human approval of the step stands (requested, approved by ..., denied, ...)."""
    speculation: str | None = None
    """For a step run ahead of confirmation: its lease, and whether it was redeemed, refused
    or discarded."""


@dataclass(frozen=True, slots=True)
class RollbackView:
    """One rollback: of the whole saga (``terminal``: closed by ``saga.end``) or of a savepoint.

    ``compensated`` and ``failed`` list ordinals in the order the log records them (newest step
    first, as the engine compensates). ``finished`` is false when no closing record follows (the
    process stopped mid-rollback); such a rollback is neither terminal nor a known savepoint one.
    """

    from_ordinal: int
    cause: ErrorInfo | None
    terminal: bool
    finished: bool
    compensated: tuple[int, ...] = ()
    failed: tuple[int, ...] = ()
    seq: int = 0
    ts: int = 0


@dataclass(frozen=True, slots=True)
class SagaView:
    """A saga as its records tell it. ``status`` is RUNNING (or SUSPENDED, after a
    ``saga.suspended`` not followed by ``saga.resumed``) when no ``saga.end`` was logged."""

    id: str
    name: str
    status: SagaStatus
    started: int
    """Timestamp of the saga's first record (milliseconds since the epoch)."""
    ended: int | None
    pid: int | None
    host: str | None
    cause: ErrorInfo | None
    """Why the saga rolled back (from ``saga.end``, else from an unfinished rollback)."""
    steps: tuple[StepView, ...]
    rollbacks: tuple[RollbackView, ...] = ()
    first_seq: int = 0
    last_seq: int = 0
    record_count: int = 0
    unknown_kinds: tuple[str, ...] = ()
    """Record kinds of this saga this reader does not interpret (shown, never dropped silently)."""
    owner: str | None = None
    """The store owner that runs (or last ran) the saga: from ``saga.begin`` or the latest
    ``saga.resumed``; ``None`` while it is suspended."""
    expires_at: int | None = None
    """For a SUSPENDED saga: when recovery may roll it back (milliseconds; ``None``: never)."""
    after_end: tuple[int, ...] = ()
    """Sequence numbers of records of this saga logged after its ``saga.end`` (none should be:
    an effect there can never be compensated)."""
    settled: str | None = None
    """Who marked this ``needs_human`` saga as handled, and their note (``agent-saga settle``);
    the status stays ``needs_human``: the log keeps what happened and who took it on."""

    @property
    def refusals(self) -> tuple[StepView, ...]:
        """The steps the gate refused."""
        return tuple(s for s in self.steps if s.outcome is StepOutcome.REFUSED)

    @property
    def savepoint_rollbacks(self) -> tuple[RollbackView, ...]:
        """Rollbacks closed by ``savepoint.rollback`` (the saga went on afterwards)."""
        return tuple(r for r in self.rollbacks if r.finished and not r.terminal)


@dataclass(frozen=True, slots=True)
class LogEvent:
    """A record that belongs to no saga: ``control.halt``, ``control.resume``, a transaction
    refused before it started (``gate.refused`` with ``saga=None``), or a kind this reader does
    not know."""

    seq: int
    ts: int
    kind: str
    reason: str | None = None
    rule: str | None = None
    saga_name: str | None = None
    data: Mapping[str, JSONValue] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class History:
    """Every saga (in order of first record, newest last) and every saga-less event."""

    sagas: tuple[SagaView, ...]
    events: tuple[LogEvent, ...]
    records: int


class SagaLookupError(AgentSagaError, LookupError):
    """No saga, or more than one, matches an id or prefix."""


class UnknownSagaError(SagaLookupError):
    """No saga id equals or starts with the given text."""


class AmbiguousSagaError(SagaLookupError):
    """The prefix matches several sagas.

    Attributes:
        candidates: the matching saga ids, oldest first.
    """

    def __init__(self, message: str, candidates: Sequence[str]) -> None:
        super().__init__(message)
        self.candidates = tuple(candidates)
