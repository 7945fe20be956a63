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
  :attr:`SagaStatus.RUNNING` (live, or abandoned by a process that died), or
  :attr:`SagaStatus.SUSPENDED` when its latest lifecycle record is ``saga.suspended``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .._log.records import Kind, Record, SagaStatus
from .ahead import AHEAD_KINDS, ahead_note
from .fields import compensation_of as _compensation
from .fields import error_info as _error
from .fields import int_field as _int
from .fields import settlement
from .fields import str_field as _str
from .views import (
    AmbiguousSagaError,
    CompensationState,
    ErrorInfo,
    History,
    LogEvent,
    Refusal,
    RollbackView,
    SagaLookupError,
    SagaView,
    StepOutcome,
    StepView,
    UnknownSagaError,
)


def build_history(records: Iterable[Record]) -> History:
    """Group ``records`` by saga and rebuild every saga's view.

    ``records`` is consumed once, in log order. The caller decides how they were read (and
    whether they were verified); this function only interprets them.
    """
    builders: dict[str, _SagaBuilder] = {}
    events: list[LogEvent] = []
    settled: dict[str, str] = {}
    count = 0
    for record in records:
        count += 1
        if record.saga is None:
            events.append(_event(record))
            settles = settlement(record)
            if settles is not None:
                settled[settles[0]] = settles[1]
            continue
        builder = builders.get(record.saga)
        if builder is None:
            builder = builders[record.saga] = _SagaBuilder(record.saga)
        builder.add(record)
    views = (b.build() for b in builders.values())
    return History(
        tuple(
            replace(v, settled=settled[v.id])
            if v.id in settled and v.status is SagaStatus.NEEDS_HUMAN
            else v
            for v in views
        ),
        tuple(events),
        count,
    )


def sagas(records: Iterable[Record]) -> list[SagaView]:
    """The sagas of ``records``, in order of their first record (newest last)."""
    return list(build_history(records).sagas)


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
class _RollbackDraft:
    from_ordinal: int
    cause: ErrorInfo | None
    seq: int
    ts: int
    terminal: bool = False
    finished: bool = False
    compensated: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)

    def view(self) -> RollbackView:
        return RollbackView(
            self.from_ordinal,
            self.cause,
            self.terminal,
            self.finished,
            tuple(self.compensated),
            tuple(self.failed),
            self.seq,
            self.ts,
        )


class _SagaBuilder:
    """Folds one saga's records, in log order, into a :class:`SagaView`."""

    def __init__(self, saga_id: str) -> None:
        self.id, self.name = saga_id, "?"
        self.pid: int | None = None
        self.host: str | None = None
        self.started = self.first_seq = self.last_seq = self.count = 0
        self.ended: int | None = None
        self.end_status: SagaStatus | None = None
        self.end_cause: ErrorInfo | None = None
        self.steps: dict[int, dict[str, Any]] = {}
        """Each step's fields so far (a :class:`StepView` is built once, at the end)."""
        self.undo_logged: set[int] = set()
        """Ordinals whose compensation has a record: their state is taken from the log."""
        self.rollbacks: list[_RollbackDraft] = []
        self.unknown: list[str] = []
        self.owner: str | None = None
        self.suspended = False
        self.expires_at: int | None = None
        self.after_end: list[int] = []

    def _update(self, record: Record, **changes: Any) -> int | None:
        """Apply ``changes`` to the step the record names; returns its ordinal (or ``None``)."""
        ordinal = _int(record.data, "ordinal")
        if ordinal is None:
            return None
        step = self.steps.get(ordinal)
        if step is None:
            tool = _str(record.data, "tool") or "?"
            step = self.steps[ordinal] = {
                "ordinal": ordinal,
                "tool": tool,
                "outcome": StepOutcome.UNKNOWN,
                "ts": record.ts,
            }
        step.update(changes)
        return ordinal

    def _refused(self, record: Record) -> None:
        data = record.data
        refusal = Refusal(_str(data, "rule") or "?", _str(data, "reason") or "")
        changes: dict[str, Any] = {"outcome": StepOutcome.REFUSED, "refusal": refusal}
        if "args" in data:  # a refusal after the intent (rule "arguments") has none
            changes["args"] = data.get("args")
        if "semantics" in data:  # the declared design of a call refused before its intent
            name, recoverable = _compensation(data.get("compensation"))
            changes.update(
                semantics=_str(data, "semantics"),
                compensation=name,
                compensation_recoverable=recoverable,
            )
        self._update(record, **changes)

    def _open_rollback(self) -> _RollbackDraft | None:
        if self.rollbacks and not self.rollbacks[-1].finished:
            return self.rollbacks[-1]
        return None

    def add(self, record: Record) -> None:
        if self.count == 0:
            self.first_seq, self.started = record.seq, record.ts
        self.count += 1
        self.last_seq = record.seq
        if self.ended is not None:
            self.after_end.append(record.seq)
        data = record.data
        rollback = self._open_rollback()
        match record.kind:
            case Kind.SAGA_BEGIN | Kind.SAGA_RESUMED | Kind.SAGA_SUSPENDED:
                self._lifecycle(record)
            case Kind.STEP_INTENT:
                name, recoverable = _compensation(data.get("compensation"))
                self._update(
                    record,
                    args=data.get("args"),
                    semantics=_str(data, "semantics"),
                    idempotency_key=_str(data, "idempotency_key"),
                    compensation=name,
                    compensation_recoverable=recoverable,
                )
            case Kind.STEP_DONE:
                self._update(record, outcome=StepOutcome.DONE, result=data.get("result"))
            case Kind.STEP_FAILED:
                self._update(record, outcome=StepOutcome.FAILED, error=_error(data.get("error")))
            case Kind.GATE_REFUSED:
                self._refused(record)
            case Kind.ROLLBACK_BEGIN:
                start = _int(data, "from_ordinal") or 1
                cause = _error(data.get("cause"))
                self.rollbacks.append(_RollbackDraft(start, cause, record.seq, record.ts))
            case Kind.COMP_INTENT:
                self._undo(record, CompensationState.STARTED, None, None)
            case Kind.COMP_DONE:
                self._undo(record, CompensationState.COMPENSATED, None, rollback)
            case Kind.COMP_FAILED:
                self._undo(record, CompensationState.FAILED, _error(data.get("error")), rollback)
            case (
                Kind.SAVEPOINT_BEGIN
                | Kind.GATE_VOTE
                | Kind.HOLD_UNSETTLED
                | Kind.SELFHEAL_ATTEMPT
                | Kind.SELFHEAL_ESCALATED
            ):
                pass  # the rollback records carry what a reader needs; gate notes are context
            case Kind.APPROVAL_REQUESTED | Kind.APPROVAL_DECIDED:
                self._approval(record)
            case Kind.SAVEPOINT_ROLLBACK:
                if rollback is not None:
                    rollback.finished = True
            case Kind.STEP_PROBED:
                landed = data.get("landed")
                answer = "cannot_tell" if landed is None else "landed" if landed else "not_landed"
                self._update(record, probe=answer)
            case Kind.SAGA_END:
                self._end(record, rollback)
            case _:
                if not self._speculation(record) and record.kind not in self.unknown:
                    self.unknown.append(record.kind)

    def _speculation(self, record: Record) -> bool:
        """Note a ``speculation.*`` record on its step; ``False`` for any other kind."""
        if record.kind not in AHEAD_KINDS:
            return False
        ordinal = _int(record.data, "ordinal")
        if ordinal is not None:  # else a lease refused before it named a step of this saga
            before = self.steps.get(ordinal, {}).get("speculation")
            self._update(record, speculation=ahead_note(record, before))
        return True

    def _lifecycle(self, record: Record) -> None:
        """Who owns the saga: its first owner, a resuming one, or nobody while suspended."""
        data = record.data
        if record.kind == Kind.SAGA_SUSPENDED:
            self.owner, self.suspended = None, True
            self.expires_at = _int(data, "expires_at")
            return
        if record.kind == Kind.SAGA_BEGIN:
            self.name = _str(data, "name") or self.name
        self.pid, self.host = _int(data, "pid"), _str(data, "host")
        self.owner, self.suspended = _str(data, "owner"), False

    def _end(self, record: Record, rollback: _RollbackDraft | None) -> None:
        self.ended = record.ts
        try:
            self.end_status = SagaStatus(_str(record.data, "status") or "")
        except ValueError:
            # An end record this reader cannot interpret is a reason for a human to look.
            self.end_status = SagaStatus.NEEDS_HUMAN
        self.end_cause = _error(record.data.get("cause"))
        if rollback is not None:
            rollback.terminal = rollback.finished = True

    def _approval(self, record: Record) -> None:
        data = record.data
        if record.kind == Kind.APPROVAL_REQUESTED:
            approvers = data.get("approvers")
            who = ", ".join(map(str, approvers)) if isinstance(approvers, list) else "?"
            quorum = _int(data, "quorum")
            text = f"requested ({_str(data, 'request')}) from {who}, quorum {quorum}"
        else:
            by = data.get("by")
            names = ", ".join(map(str, by)) if isinstance(by, list) and by else "nobody"
            decision = _str(data, "decision") or "?"
            text = f"{decision} ({_str(data, 'request')}); approved by {names}"
        self._update(record, approval=text)

    def _undo(
        self,
        record: Record,
        state: CompensationState,
        error: ErrorInfo | None,
        rollback: _RollbackDraft | None,
    ) -> None:
        ordinal = self._update(record, compensation_state=state, compensation_error=error)
        if ordinal is None:
            return
        self.undo_logged.add(ordinal)
        if rollback is not None and state is not CompensationState.STARTED:
            done = state is CompensationState.COMPENSATED
            (rollback.compensated if done else rollback.failed).append(ordinal)

    def build(self) -> SagaView:
        running = SagaStatus.SUSPENDED if self.suspended else SagaStatus.RUNNING
        status = self.end_status or running
        cause = self.end_cause
        if cause is None and status is not SagaStatus.COMMITTED:
            unfinished = [r for r in self.rollbacks if not r.finished]
            cause = unfinished[-1].cause if unfinished else None
        steps = tuple(
            StepView(**fields)
            if ordinal in self.undo_logged
            else StepView(**fields, compensation_state=_unlogged_undo(fields, status))
            for ordinal, fields in sorted(self.steps.items())
        )
        return SagaView(
            id=self.id,
            name=self.name,
            status=status,
            started=self.started,
            ended=self.ended,
            pid=self.pid,
            host=self.host,
            cause=cause,
            steps=steps,
            rollbacks=tuple(r.view() for r in self.rollbacks),
            first_seq=self.first_seq,
            last_seq=self.last_seq,
            record_count=self.count,
            unknown_kinds=tuple(self.unknown),
            owner=self.owner,
            expires_at=self.expires_at if status is SagaStatus.SUSPENDED else None,
            after_end=tuple(self.after_end),
        )


def _unlogged_undo(step: Mapping[str, Any], status: SagaStatus) -> CompensationState:
    """The compensation state of a step (its fields) with no compensation record, from what
    else is known."""
    if step["outcome"] in (StepOutcome.FAILED, StepOutcome.REFUSED):
        return CompensationState.NOT_NEEDED
    if status is SagaStatus.COMMITTED:
        return CompensationState.NOT_NEEDED
    if step.get("compensation") is None:
        if step.get("semantics") in (None, "reversible"):
            return CompensationState.NOT_NEEDED
        return CompensationState.NONE_DECLARED
    return CompensationState.PENDING


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
    "sagas",
]
