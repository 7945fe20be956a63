"""Saga history: what the log says happened, rebuilt from records, read-only.

Invariants:

* Reading only. Nothing here imports, resolves or calls a tool or a compensator, writes a record
  or touches a store: the input is an iterable of already-read :class:`Record` objects and the
  output is frozen views of them. Replaying a saga's history can therefore never repeat an effect.
* Total over odd input. A record with missing or mistyped data fields, an unknown kind, or a
  saga whose ``saga.begin`` is missing still yields a view (with ``None``/``"?"`` where the log is
  silent); nothing here raises on record contents.
* Honest about gaps. A step whose intent was logged without an outcome is
  :attr:`StepOutcome.UNKNOWN`, never assumed done or failed; a saga without ``saga.end`` is
  :attr:`SagaStatus.RUNNING` (live, or abandoned by a process that died).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ._codec import JSONValue
from ._errors import AgentSagaError
from ._records import Kind, Record, SagaStatus


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

    ``semantics``, ``idempotency_key`` and ``compensation`` come from the step's intent record and
    are ``None`` for a refused call (the gate decides before the intent is logged).
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
    """A saga as its records tell it. ``status`` is RUNNING when no ``saga.end`` was logged."""

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


def build_history(records: Iterable[Record]) -> History:
    """Group ``records`` by saga and rebuild every saga's view.

    ``records`` is consumed once, in log order. The caller decides how they were read (and
    whether they were verified); this function only interprets them.
    """
    builders: dict[str, _SagaBuilder] = {}
    events: list[LogEvent] = []
    count = 0
    for record in records:
        count += 1
        if record.saga is None:
            events.append(_event(record))
            continue
        builder = builders.get(record.saga)
        if builder is None:
            builder = builders[record.saga] = _SagaBuilder(record.saga)
        builder.add(record)
    return History(tuple(b.build() for b in builders.values()), tuple(events), count)


def sagas(records: Iterable[Record]) -> list[SagaView]:
    """The sagas of ``records``, in order of their first record (newest last)."""
    return list(build_history(records).sagas)


def find_saga(views: Sequence[SagaView], id_or_prefix: str) -> SagaView:
    """The saga whose id is ``id_or_prefix``, or the only one whose id starts with it.

    An exact id wins over prefix matches (so ``saga-1`` is found even if ``saga-10`` exists).

    Raises:
        UnknownSagaError: nothing matches (or the text is empty).
        AmbiguousSagaError: several ids start with the text; the message lists them.
    """
    wanted = id_or_prefix.strip()
    if not wanted:
        raise UnknownSagaError("empty saga id")
    for view in views:
        if view.id == wanted:
            return view
    matches = [view for view in views if view.id.startswith(wanted)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise UnknownSagaError(f"no saga matches {wanted!r} ({len(views)} saga(s) in the log)")
    ids = [view.id for view in matches]
    shown = ", ".join(ids[:5]) + (f", ... ({len(ids) - 5} more)" if len(ids) > 5 else "")
    raise AmbiguousSagaError(
        f"saga id prefix {wanted!r} is ambiguous: {len(ids)} sagas match: {shown}", ids
    )


# -- reading record data defensively --------------------------------------------------------


def _str(data: Mapping[str, JSONValue], key: str) -> str | None:
    value = data.get(key)
    return value if isinstance(value, str) else None


def _int(data: Mapping[str, JSONValue], key: str) -> int | None:
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _ints(data: Mapping[str, JSONValue], key: str) -> tuple[int, ...]:
    value = data.get(key)
    if not isinstance(value, list):
        return ()
    return tuple(v for v in value if isinstance(v, int) and not isinstance(v, bool))


def _error(value: JSONValue) -> ErrorInfo | None:
    if not isinstance(value, dict):
        return None
    kind, message = value.get("type"), value.get("message")
    return ErrorInfo(
        kind if isinstance(kind, str) else "?", message if isinstance(message, str) else ""
    )


def _compensation(value: JSONValue) -> tuple[str | None, bool | None]:
    if not isinstance(value, dict):
        return None, None
    recoverable = value.get("recoverable")
    flag = recoverable if isinstance(recoverable, bool) else None
    name, func = value.get("name"), value.get("callable")
    if isinstance(name, str):
        return name, flag
    if isinstance(func, str):
        return f"callable {func}", flag
    return None, flag


def _event(record: Record) -> LogEvent:
    data = record.data
    return LogEvent(
        record.seq,
        record.ts,
        record.kind,
        _str(data, "reason"),
        _str(data, "rule"),
        _str(data, "saga_name"),
        dict(data),
    )


# -- rebuilding one saga ----------------------------------------------------------------------


@dataclass
class _StepDraft:
    ordinal: int
    tool: str
    ts: int
    outcome: StepOutcome = StepOutcome.UNKNOWN
    args: JSONValue = None
    semantics: str | None = None
    key: str | None = None
    compensation: str | None = None
    recoverable: bool | None = None
    declared: bool = False
    result: JSONValue = None
    error: ErrorInfo | None = None
    refusal: Refusal | None = None
    comp_started: bool = False
    comp_done: bool = False
    comp_error: ErrorInfo | None = None
    comp_failed: bool = False


@dataclass
class _RollbackDraft:
    from_ordinal: int
    cause: ErrorInfo | None
    seq: int
    ts: int
    terminal: bool = False
    finished: bool = False
    compensated: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)


class _SagaBuilder:
    def __init__(self, saga_id: str) -> None:
        self.id = saga_id
        self.name = "?"
        self.pid: int | None = None
        self.host: str | None = None
        self.started: int | None = None
        self.ended: int | None = None
        self.end_status: SagaStatus | None = None
        self.end_cause: ErrorInfo | None = None
        self.steps: dict[int, _StepDraft] = {}
        self.rollbacks: list[_RollbackDraft] = []
        self.first_seq = 0
        self.last_seq = 0
        self.count = 0
        self.unknown: list[str] = []

    def _step(self, record: Record) -> _StepDraft | None:
        ordinal = _int(record.data, "ordinal")
        if ordinal is None:
            return None
        draft = self.steps.get(ordinal)
        if draft is None:
            tool = _str(record.data, "tool") or "?"
            draft = self.steps[ordinal] = _StepDraft(ordinal, tool, record.ts)
        return draft

    def _open_rollback(self) -> _RollbackDraft | None:
        if self.rollbacks and not self.rollbacks[-1].finished:
            return self.rollbacks[-1]
        return None

    def add(self, record: Record) -> None:
        if self.count == 0:
            self.first_seq, self.started = record.seq, record.ts
        self.count += 1
        self.last_seq = record.seq
        data = record.data
        handler = _HANDLERS.get(record.kind)
        if handler is None:
            if record.kind not in self.unknown:
                self.unknown.append(record.kind)
            return
        handler(self, record, data)

    # -- handlers, one per record kind --------------------------------------------------------

    def _begin(self, record: Record, data: Mapping[str, JSONValue]) -> None:
        self.name = _str(data, "name") or self.name
        self.pid = _int(data, "pid")
        self.host = _str(data, "host")

    def _intent(self, record: Record, data: Mapping[str, JSONValue]) -> None:
        step = self._step(record)
        if step is None:
            return
        step.args = data.get("args")
        step.semantics = _str(data, "semantics")
        step.key = _str(data, "idempotency_key")
        step.compensation, step.recoverable = _compensation(data.get("compensation"))
        step.declared = True

    def _done(self, record: Record, data: Mapping[str, JSONValue]) -> None:
        step = self._step(record)
        if step is not None:
            step.outcome, step.result = StepOutcome.DONE, data.get("result")

    def _failed(self, record: Record, data: Mapping[str, JSONValue]) -> None:
        step = self._step(record)
        if step is not None:
            step.outcome, step.error = StepOutcome.FAILED, _error(data.get("error"))

    def _refused(self, record: Record, data: Mapping[str, JSONValue]) -> None:
        step = self._step(record)
        if step is not None:
            step.outcome = StepOutcome.REFUSED
            step.args = data.get("args")
            step.refusal = Refusal(_str(data, "rule") or "?", _str(data, "reason") or "")

    def _rollback_begin(self, record: Record, data: Mapping[str, JSONValue]) -> None:
        cause = _error(data.get("cause"))
        start = _int(data, "from_ordinal") or 1
        self.rollbacks.append(_RollbackDraft(start, cause, record.seq, record.ts))

    def _comp_intent(self, record: Record, data: Mapping[str, JSONValue]) -> None:
        step = self._step(record)
        if step is not None:
            step.comp_started = True

    def _comp_done(self, record: Record, data: Mapping[str, JSONValue]) -> None:
        step = self._step(record)
        if step is None:
            return
        step.comp_done = True
        rollback = self._open_rollback()
        if rollback is not None:
            rollback.compensated.append(step.ordinal)

    def _comp_failed(self, record: Record, data: Mapping[str, JSONValue]) -> None:
        step = self._step(record)
        if step is None:
            return
        step.comp_failed, step.comp_error = True, _error(data.get("error"))
        rollback = self._open_rollback()
        if rollback is not None:
            rollback.failed.append(step.ordinal)

    def _savepoint_rollback(self, record: Record, data: Mapping[str, JSONValue]) -> None:
        rollback = self._open_rollback()
        if rollback is not None:
            rollback.finished = True

    def _savepoint_begin(self, record: Record, data: Mapping[str, JSONValue]) -> None:
        return  # the rollback records carry what a reader needs

    def _end(self, record: Record, data: Mapping[str, JSONValue]) -> None:
        self.ended = record.ts
        try:
            self.end_status = SagaStatus(_str(data, "status") or "")
        except ValueError:
            # An end record this reader cannot interpret is a reason for a human to look.
            self.end_status = SagaStatus.NEEDS_HUMAN
        self.end_cause = _error(data.get("cause"))
        rollback = self._open_rollback()
        if rollback is not None:
            rollback.terminal = rollback.finished = True

    # -- assembling the view --------------------------------------------------------------------

    def build(self) -> SagaView:
        status = self.end_status or SagaStatus.RUNNING
        cause = self.end_cause
        if cause is None and status is not SagaStatus.COMMITTED:
            unfinished = [r for r in self.rollbacks if not r.finished]
            cause = unfinished[-1].cause if unfinished else None
        rollbacks = tuple(
            RollbackView(
                r.from_ordinal,
                r.cause,
                r.terminal,
                r.finished,
                tuple(r.compensated),
                tuple(r.failed),
                r.seq,
                r.ts,
            )
            for r in self.rollbacks
        )
        steps = tuple(_step_view(d, status) for _, d in sorted(self.steps.items()))
        return SagaView(
            id=self.id,
            name=self.name,
            status=status,
            started=self.started or 0,
            ended=self.ended,
            pid=self.pid,
            host=self.host,
            cause=cause,
            steps=steps,
            rollbacks=rollbacks,
            first_seq=self.first_seq,
            last_seq=self.last_seq,
            record_count=self.count,
            unknown_kinds=tuple(self.unknown),
        )


_Handler = Callable[[_SagaBuilder, Record, Mapping[str, JSONValue]], None]
_HANDLERS: dict[str, _Handler] = {
    Kind.SAGA_BEGIN.value: _SagaBuilder._begin,
    Kind.SAGA_END.value: _SagaBuilder._end,
    Kind.GATE_REFUSED.value: _SagaBuilder._refused,
    Kind.STEP_INTENT.value: _SagaBuilder._intent,
    Kind.STEP_DONE.value: _SagaBuilder._done,
    Kind.STEP_FAILED.value: _SagaBuilder._failed,
    Kind.ROLLBACK_BEGIN.value: _SagaBuilder._rollback_begin,
    Kind.COMP_INTENT.value: _SagaBuilder._comp_intent,
    Kind.COMP_DONE.value: _SagaBuilder._comp_done,
    Kind.COMP_FAILED.value: _SagaBuilder._comp_failed,
    Kind.SAVEPOINT_BEGIN.value: _SagaBuilder._savepoint_begin,
    Kind.SAVEPOINT_ROLLBACK.value: _SagaBuilder._savepoint_rollback,
}


def _compensation_state(draft: _StepDraft, status: SagaStatus) -> CompensationState:
    if draft.comp_failed:
        return CompensationState.FAILED
    if draft.comp_done:
        return CompensationState.COMPENSATED
    if draft.comp_started:
        return CompensationState.STARTED
    if draft.outcome in (StepOutcome.FAILED, StepOutcome.REFUSED):
        return CompensationState.NOT_NEEDED
    if status is SagaStatus.COMMITTED:
        return CompensationState.NOT_NEEDED
    if draft.compensation is None:
        if draft.semantics in (None, "reversible"):
            return CompensationState.NOT_NEEDED
        return CompensationState.NONE_DECLARED
    return CompensationState.PENDING


def _step_view(draft: _StepDraft, status: SagaStatus) -> StepView:
    return StepView(
        ordinal=draft.ordinal,
        tool=draft.tool,
        outcome=draft.outcome,
        args=draft.args,
        semantics=draft.semantics,
        idempotency_key=draft.key,
        compensation=draft.compensation,
        compensation_recoverable=draft.recoverable,
        result=draft.result,
        error=draft.error,
        refusal=draft.refusal,
        compensation_state=_compensation_state(draft, status),
        compensation_error=draft.comp_error,
        ts=draft.ts,
    )


__all__ = [
    "AmbiguousSagaError",
    "CompensationState",
    "ErrorInfo",
    "History",
    "LogEvent",
    "Refusal",
    "RollbackView",
    "SagaLookupError",
    "SagaView",
    "StepOutcome",
    "StepView",
    "UnknownSagaError",
    "build_history",
    "find_saga",
    "sagas",
]
