"""Compensating a saga's committed steps: the bookkeeping shared by sync and async rollback.

Each step is marked before its compensator runs, so it is compensated at most once in the
process. A compensation's intent is logged before it runs (durably when the step's intent was),
its outcome after; a log failure during a rollback is recorded and the remaining compensations
still run.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from typing import Any

from .._errors import LogError
from .._log.codec import JSONValue
from .._log.records import Kind, SagaStatus, Semantics
from .compensation import CompensationRef, compensator_kwargs
from .report import CompensationFailure, RollbackReport, StepRef
from .state import SagaState
from .steps import Step


def error_info(exc: BaseException) -> dict[str, JSONValue]:
    """An exception as records store it."""
    return {"type": type(exc).__qualname__, "message": str(exc)[:2000]}


class RollbackState:
    """Bookkeeping shared by the sync and async rollback loops."""

    def __init__(self, saga: SagaState, cause: BaseException, from_ordinal: int) -> None:
        self.saga = saga
        self.cause = cause
        self.from_ordinal = from_ordinal
        self.compensated: list[StepRef] = []
        self.failed: list[CompensationFailure] = []
        self.nothing: list[StepRef] = []
        self.log_errors: list[str] = []
        self._log(
            Kind.ROLLBACK_BEGIN,
            {"cause": error_info(cause), "from_ordinal": from_ordinal},
            durable=False,
        )

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
        if ref is None:
            self.nothing.append(step.ref)
            return None
        func = self._resolve(ref)
        obs = self.saga.events
        if obs is not None:
            obs.compensation_begin(self.saga, step.ref)
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

    def finish(self, terminal: bool) -> RollbackReport:
        # A terminal record covers the whole saga: a compensation that failed in a savepoint
        # earlier is an effect still in place, so the saga needs a human.
        failed = self.saga.failed_compensations if terminal else self.failed
        # An IRREVERSIBLE effect that took place stands after the rollback: as after a crash
        # (recovery escalates it), the saga needs a human rather than reading "rolled back".
        standing = _irreversible_done(self.saga) if terminal else []
        status = SagaStatus.NEEDS_HUMAN if failed or standing else SagaStatus.ROLLED_BACK
        if terminal:
            self.saga.status = status
            end: dict[str, JSONValue] = {
                "status": status.value,
                "cause": error_info(self.cause),
                "compensated": [r.ordinal for r in self.compensated],
                "failed": [f.step.ordinal for f in failed],
            }
            if standing:
                end["irreversible"] = list(standing)
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
            self.saga.status = status
        if terminal and self.saga.events is not None:
            self.saga.events.saga_end(self.saga, self.cause)
        return RollbackReport(
            self.saga.id,
            status,
            tuple(self.compensated),
            tuple(self.failed),
            tuple(self.nothing),
            tuple(self.log_errors),
        )


def comp_key(step: Step) -> str:
    return f"{step.ref.idempotency_key}/compensate"


def run_coroutine(awaitable: Any) -> None:
    """Run an async compensator to completion from sync code, whatever loop is running here."""
    import asyncio  # deferred: only sync rollbacks of async compensators need it

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(as_coroutine(awaitable))
        return
    # A loop runs in this thread (a sync transaction inside async code): use a fresh thread.
    errors: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(as_coroutine(awaitable))
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=run, name="agent-saga-compensate")
    worker.start()
    worker.join()
    if errors:
        raise errors[0]


async def as_coroutine(awaitable: Any) -> None:
    await awaitable


def roll_back(
    saga: SagaState, cause: BaseException, from_ordinal: int, terminal: bool
) -> RollbackReport:
    """Compensate ``saga``'s committed steps from ``from_ordinal`` on, newest first, each at
    most once (see :meth:`Saga.rollback`); async compensators are run to completion."""
    state = RollbackState(saga, cause, from_ordinal)
    for step in _to_undo(saga, from_ordinal):
        func = state.begin_step(step)
        if func is None:
            continue
        try:
            outcome = func(**state.kwargs(step, func))
            if inspect.isawaitable(outcome):
                run_coroutine(outcome)
        except Exception as exc:
            state.step_failed(step, exc)
        else:
            state.step_done(step)
    return _finish(saga, state, from_ordinal, terminal)


async def aroll_back(
    saga: SagaState, cause: BaseException, from_ordinal: int, terminal: bool
) -> RollbackReport:
    """:func:`roll_back` for async transactions: async compensators are awaited."""
    state = RollbackState(saga, cause, from_ordinal)
    for step in _to_undo(saga, from_ordinal):
        func = state.begin_step(step)
        if func is None:
            continue
        try:
            outcome = func(**state.kwargs(step, func))
            if inspect.isawaitable(outcome):
                await outcome
        except Exception as exc:
            state.step_failed(step, exc)
        else:
            state.step_done(step)
    return _finish(saga, state, from_ordinal, terminal)


def _finish(
    saga: SagaState, state: RollbackState, from_ordinal: int, terminal: bool
) -> RollbackReport:
    report = state.finish(terminal)
    if saga.holds:
        saga.holds.settle(from_ordinal, keep={f.step.ordinal for f in report.failed})
    return report


def _to_undo(saga: SagaState, from_ordinal: int) -> list[Step]:
    steps = [s for s in saga.committed_steps() if s.ref.ordinal >= from_ordinal]
    return sorted(
        (s for s in steps if not s.compensated), key=lambda s: s.ref.ordinal, reverse=True
    )


def _irreversible_done(saga: SagaState) -> list[int]:
    """Ordinals of IRREVERSIBLE steps whose effect took place (nothing can undo them)."""
    return [
        s.ref.ordinal for s in saga.committed_steps() if s.spec.semantics is Semantics.IRREVERSIBLE
    ]
