"""Compensating a saga's steps: the bookkeeping shared by sync and async rollback.

Invariants:

* Each step is marked before its compensator runs, so it is compensated at most once in the
  process. A compensation's intent is logged before it runs (durably when the step's intent
  was), its outcome after; a log failure during a rollback is recorded and the remaining
  compensations still run.
* A savepoint compensates the steps made inside it (in its own thread or task), never those of
  concurrent branches; the saga's terminal rollback compensates every step.
* A step whose tool raised may still have taken effect (a timeout after the charge landed): when
  its tool has a probe, the probe is asked and the step compensated if it landed; a probe that
  cannot tell makes the saga need a human; without a probe the step is reported ``unknown``.
* A compensation interrupted by ``BaseException`` (Ctrl-C, ``SystemExit``, cancellation) stays
  pending: nothing more is compensated or logged in this process, no terminal record is
  written, and ``agent-saga recover`` finishes the rollback once this process is gone.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from .._errors import LogError
from .._log.codec import JSONValue, to_jsonable
from .._log.records import Kind, SagaStatus, Semantics
from .calls import call_to_completion, run_coroutine
from .compensation import CompensationRef, compensator_kwargs
from .report import CompensationFailure, RollbackReport, StepRef
from .state import SagaState
from .steps import Step, in_scope


def error_info(exc: BaseException) -> dict[str, JSONValue]:
    """An exception as records store it."""
    return {"type": type(exc).__qualname__, "message": str(exc)[:2000]}


class RollbackState:
    """Bookkeeping shared by the sync and async rollback loops."""

    def __init__(self, saga: SagaState, cause: BaseException, savepoint: int | None) -> None:
        self.saga = saga
        self.cause = cause
        self.savepoint = savepoint
        self.compensated: list[StepRef] = []
        self.failed: list[CompensationFailure] = []
        self.nothing: list[StepRef] = []
        self.unknown: list[StepRef] = []
        self.escalated: list[StepRef] = []
        self.log_errors: list[str] = []
        number, first = saga.savepoints.get(savepoint, (0, 1)) if savepoint else (0, 1)
        self.from_ordinal = first
        begin: dict[str, JSONValue] = {"cause": error_info(cause), "from_ordinal": first}
        if number:
            begin["savepoint"] = number
        self._log(Kind.ROLLBACK_BEGIN, begin, durable=False)

    def _log(
        self, kind: Kind, data: dict[str, JSONValue], *, durable: bool, flush: bool = False
    ) -> None:
        # During a rollback a log failure must not stop the remaining compensations.
        try:
            self.saga.log(kind, data, durable=durable, flush=flush)
        except LogError as exc:
            self.log_errors.append(f"{kind.value}: {exc}")

    def begin_step(self, step: Step) -> Callable[..., Any] | None:
        """Mark ``step`` as being compensated; returns its compensator, or ``None`` if none."""
        step.compensated = True
        ref = step.spec.compensation
        if step.raised and not self._landed(step):
            return None
        if ref is None:
            self.nothing.append(step.ref)
            return None
        func = self._resolve(ref)
        events = self.saga.events
        if events is not None:
            events.compensation_begin(self.saga, step.ref)
        self._log(
            Kind.COMP_INTENT,
            {
                "ordinal": step.ref.ordinal,
                "tool": step.ref.tool,
                "compensation": ref.describe(),
                "idempotency_key": comp_key(step),
            },
            durable=step.spec.durable_intent,
        )
        if func is None:
            self.step_failed(step, LookupError(f"compensator {ref.name!r} is not registered"))
        return func

    def _landed(self, step: Step) -> bool:
        """Ask the probe of a step whose tool raised; true when it must be compensated."""
        probe = self.saga.runtime.registry.probe(step.ref.tool)
        if probe is None:
            self.unknown.append(step.ref)  # assumed not landed: the manifest says so
            return False
        try:
            args = compensator_kwargs(probe, step.args, None, step.ref.idempotency_key)
            answer = call_to_completion(probe, args)
        except Exception:
            answer = None
        landed = None if answer is None else answer is not False
        self._log(
            Kind.STEP_PROBED,
            {"ordinal": step.ref.ordinal, "tool": step.ref.tool, "landed": landed},
            durable=False,
        )
        if landed is None or (landed and step.spec.semantics is Semantics.IRREVERSIBLE):
            self.unknown.append(step.ref)
            self.escalated.append(step.ref)
            return False
        if landed:
            step.result = None if answer is True else to_jsonable(answer)
        return landed

    def _resolve(self, ref: CompensationRef) -> Callable[..., Any] | None:
        if ref.name is None:
            return ref.func
        return self.saga.runtime.registry.get(ref.name)

    def kwargs(self, step: Step, func: Callable[..., Any]) -> dict[str, Any]:
        return compensator_kwargs(func, step.args, step.result, comp_key(step))

    def step_done(self, step: Step) -> None:
        self.compensated.append(step.ref)
        self._log(
            Kind.COMP_DONE,
            {"ordinal": step.ref.ordinal, "tool": step.ref.tool},
            durable=False,
            flush=step.spec.durable_intent,
        )
        if self.saga.events is not None:
            self.saga.events.compensation_end(self.saga, step.ref, None)

    def step_failed(self, step: Step, exc: BaseException) -> None:
        failure = CompensationFailure(step.ref, f"{type(exc).__name__}: {exc}")
        self.failed.append(failure)
        self.saga.failed_compensations.append(failure)
        self._log(
            Kind.COMP_FAILED,
            {"ordinal": step.ref.ordinal, "tool": step.ref.tool, "error": error_info(exc)},
            durable=False,
            flush=step.spec.durable_intent,
        )
        if self.saga.events is not None:
            self.saga.events.compensation_end(self.saga, step.ref, exc)

    def step_interrupted(self, step: Step, exc: BaseException) -> None:
        """A compensation stopped by a ``BaseException``: it stays pending (intent, no outcome)
        and the saga is left for recovery; the caller re-raises."""
        self.saga.interrupted = exc
        exc.add_note(
            f"agent-saga: compensation of step #{step.ref.ordinal} {step.ref.tool} of saga "
            f"{self.saga.id} was interrupted; `agent-saga recover` finishes the rollback"
        )

    def finish(self, terminal: bool) -> RollbackReport:
        saga = self.saga
        # A terminal record covers the whole saga: a compensation that failed in a savepoint
        # earlier is an effect still in place, so the saga needs a human.
        failed = saga.failed_compensations if terminal else self.failed
        # An IRREVERSIBLE effect that took place stands after the rollback: as after a crash
        # (recovery escalates it), the saga needs a human rather than reading "rolled back".
        standing = _irreversible_done(saga) if terminal else []
        needs_human = failed or standing or self.escalated
        status = SagaStatus.NEEDS_HUMAN if needs_human else SagaStatus.ROLLED_BACK
        if terminal:
            saga.status = status
            end: dict[str, JSONValue] = {
                "status": status.value,
                "cause": error_info(self.cause),
                "compensated": [r.ordinal for r in self.compensated],
                "failed": [f.step.ordinal for f in failed],
            }
            if standing:
                end["irreversible"] = list(standing)
            if self.unknown:
                end["unknown"] = [r.ordinal for r in self.unknown]
            self._log(Kind.SAGA_END, end, durable=True)
        else:
            self._log(
                Kind.SAVEPOINT_ROLLBACK,
                {
                    "from_ordinal": self.from_ordinal,
                    "compensated": [r.ordinal for r in self.compensated],
                    "failed": [f.step.ordinal for f in self.failed],
                },
                durable=True,
            )
        if self.log_errors and terminal:
            status = SagaStatus.NEEDS_HUMAN
            saga.status = status
        if terminal and saga.events is not None:
            saga.events.saga_end(saga, self.cause)
        return RollbackReport(
            saga.id,
            status,
            tuple(self.compensated),
            tuple(self.failed),
            tuple(self.nothing),
            tuple(self.log_errors),
            tuple(self.unknown),
        )


def comp_key(step: Step) -> str:
    return f"{step.ref.idempotency_key}/compensate"


def roll_back(
    saga: SagaState, cause: BaseException, savepoint: int | None, terminal: bool
) -> RollbackReport:
    """Compensate the steps of ``savepoint`` (``None``: of the saga), newest first, each at
    most once (see :meth:`Saga.rollback`); async compensators are run to completion."""
    if saga.interrupted is not None:
        return _left_for_recovery(saga)
    state = RollbackState(saga, cause, savepoint)
    for step in _to_undo(saga, savepoint):
        func = state.begin_step(step)
        if func is None:
            continue
        try:
            outcome = func(**state.kwargs(step, func))
            if inspect.isawaitable(outcome):
                run_coroutine(outcome)
        except Exception as exc:
            state.step_failed(step, exc)
        except BaseException as exc:
            state.step_interrupted(step, exc)
            raise
        else:
            state.step_done(step)
    return _finish(saga, state, savepoint, terminal)


async def aroll_back(
    saga: SagaState, cause: BaseException, savepoint: int | None, terminal: bool
) -> RollbackReport:
    """:func:`roll_back` for async transactions: async compensators are awaited."""
    if saga.interrupted is not None:
        return _left_for_recovery(saga)
    state = RollbackState(saga, cause, savepoint)
    for step in _to_undo(saga, savepoint):
        func = state.begin_step(step)
        if func is None:
            continue
        try:
            outcome = func(**state.kwargs(step, func))
            if inspect.isawaitable(outcome):
                await outcome
        except Exception as exc:
            state.step_failed(step, exc)
        except BaseException as exc:
            state.step_interrupted(step, exc)
            raise
        else:
            state.step_done(step)
    return _finish(saga, state, savepoint, terminal)


def _finish(
    saga: SagaState, state: RollbackState, savepoint: int | None, terminal: bool
) -> RollbackReport:
    report = state.finish(terminal)
    if saga.holds:
        ordinals = None if savepoint is None else _ordinals_in(saga, savepoint)
        saga.holds.settle(ordinals, keep={f.step.ordinal for f in report.failed})
    return report


def _left_for_recovery(saga: SagaState) -> RollbackReport:
    """The report of a rollback after an interrupted compensation: nothing more is done here."""
    pending = [s.ref for s in (*saga.committed_steps(), *saga.raised) if not s.compensated]
    return RollbackReport(saga.id, SagaStatus.RUNNING, interrupted=tuple(pending))


def _ordinals_in(saga: SagaState, savepoint: int) -> set[int]:
    with saga.lock:
        steps = [*saga.steps, *saga.raised]
    return {s.ref.ordinal for s in steps if in_scope(s.scopes, savepoint)}


def _to_undo(saga: SagaState, savepoint: int | None) -> list[Step]:
    """The steps of the scope not yet compensated (or probed), newest first."""
    with saga.lock:
        steps = [*saga.steps, *saga.raised]
    due = [s for s in steps if not s.compensated and in_scope(s.scopes, savepoint)]
    return sorted(due, key=lambda s: s.ref.ordinal, reverse=True)


def _irreversible_done(saga: SagaState) -> list[int]:
    """Ordinals of IRREVERSIBLE steps whose effect took place (nothing can undo them)."""
    return [
        s.ref.ordinal for s in saga.committed_steps() if s.spec.semantics is Semantics.IRREVERSIBLE
    ]
