"""Transactions: the context manager (sync and async) and decorator that own a saga.

Semantics:

* Entering checks the kill switch; a halted start raises :class:`HaltedError` and leaves no
  saga behind (``current_saga()`` is unchanged).
* Leaving normally writes the durable ``committed`` record before returning, unless a step
  failed without an exception reaching the block (:meth:`Saga.doom`, used by framework adapters):
  then the saga rolls back and :class:`SagaRolledBack` is raised, as if the tool's exception had.
* Leaving by an exception compensates the committed steps in reverse order and raises
  :class:`SagaRolledBack` (chained to the cause). ``KeyboardInterrupt``, ``SystemExit`` and task
  cancellation still roll back but propagate unchanged, with the report added as a note.
* A transaction opened inside another one of the same engine is a savepoint: its failure
  compensates only its own steps, then raises :class:`SagaRolledBack` into the outer block,
  which may catch it and continue.
* Once the outermost block starts to leave, the saga takes no more steps (a run that outlives
  its transaction gets :class:`SagaEndedError`). A call paused by a framework and never
  continued is logged failed first.
* :meth:`Saga.suspend` makes a normal exit write ``saga.suspended`` instead of committing; a
  transaction made with ``resume=`` continues such a saga, read back from the log, instead of
  starting one (the reading is given by the kit: it lives above the engine).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from contextvars import ContextVar, Token
from typing import Any, TypeVar, cast

from .._errors import ConfigurationError, HaltedError, ResumeError
from .._log.records import Entry, Kind
from .report import RollbackReport, SagaRolledBack
from .runtime import Runtime
from .saga import _CURRENT, Saga
from .steps import SCOPES

F = TypeVar("F", bound=Callable[..., Any])


class _Frame:
    """One entry into a transaction: the saga, and how to undo what entering made current."""

    __slots__ = ("frames_token", "saga", "savepoint", "scope_token", "token")

    def __init__(
        self,
        saga: Saga,
        token: Token[Saga | None] | None,
        savepoint: int | None = None,
        scope_token: Token[tuple[int, ...]] | None = None,
    ) -> None:
        self.saga = saga
        self.token = token
        self.savepoint = savepoint
        self.scope_token = scope_token
        self.frames_token: Token[tuple[_Frame, ...]] | None = None


class Transaction:
    """A reusable transaction declaration: ``with``, ``async with`` or a decorator.

    One object may be entered by several threads or asyncio tasks at once: each entry is kept
    in the context that made it (a context variable per object), so every thread or task gets
    its own saga (or its own savepoint of the saga current there) and leaves exactly that.
    """

    def __init__(
        self,
        runtime: Callable[[], Runtime],
        name: str | None = None,
        *,
        resume: Callable[[Runtime], Saga] | None = None,
    ) -> None:
        self._runtime = runtime
        self.name = name
        self._resume = resume
        self._frames: ContextVar[tuple[_Frame, ...]] = ContextVar("agent_saga_frames", default=())

    # -- entering ------------------------------------------------------------------------------

    def _enter(self) -> Saga:
        runtime = self._runtime()
        parent = _CURRENT.get()
        if self._resume is not None:
            if parent is not None:
                raise ResumeError(f"cannot resume a saga inside saga {parent.id}'s transaction")
            saga = self._resume(runtime)
            self._push(_Frame(saga, _CURRENT.set(saga), None, SCOPES.set(())))
            return saga
        if parent is not None and parent.runtime is runtime:
            savepoint = parent.savepoint()
            scope_token = SCOPES.set((*SCOPES.get(), savepoint))
            self._push(_Frame(parent, None, savepoint, scope_token))
            return parent
        name = self.name or "transaction"
        guard = getattr(runtime.store, "fork_guard", None)
        if guard is not None:  # refused at entry, before any tool of the saga runs
            guard.check()
        halt = runtime.kill_switch.state()
        if halt.halted:
            reason = halt.reason
            entry = Entry(
                Kind.GATE_REFUSED.value,
                None,
                {"saga_name": name, "rule": "kill_switch", "reason": reason, "tool": None},
                int(runtime.clock.now() * 1000),
            )
            runtime.store.append([entry], sync=True)
            raise HaltedError(f"transaction {name!r}", reason)
        saga = Saga(runtime, runtime.ids.new_id(), name)
        saga.begin()
        self._push(_Frame(saga, _CURRENT.set(saga), None, SCOPES.set(())))
        return saga

    def _push(self, frame: _Frame) -> None:
        # Reset (not set back) on leaving: the context then drops this variable again, so a
        # long-running process keeps no trace of the transactions it ran.
        frame.frames_token = self._frames.set((*self._frames.get(), frame))

    def __enter__(self) -> Saga:
        return self._enter()

    async def __aenter__(self) -> Saga:
        return self._enter()

    # -- leaving ---------------------------------------------------------------------------

    def _leave(self, exc: BaseException | None) -> tuple[_Frame, BaseException] | None:
        """Pop this context's frame; commit on success. Returns the frame and cause when a
        rollback is due."""
        frame = self._frames.get()[-1]
        if frame.frames_token is not None:
            self._frames.reset(frame.frames_token)
        if frame.scope_token is not None:
            SCOPES.reset(frame.scope_token)
        if frame.token is not None:
            _CURRENT.reset(frame.token)
        saga = frame.saga
        doom = saga.take_doom(frame.savepoint)
        if frame.token is not None:  # the saga's own block: it takes no more steps
            suspend = saga.suspending is not None and exc is None and doom is None
            saga.closed = "been suspended" if suspend else "ended"
            if saga.parked and not suspend:
                saga.abandon_parked()
            if suspend:
                try:
                    saga.write_suspended()
                except ConfigurationError as refused:  # a step no later process can undo
                    saga.closed = "ended"
                    return frame, refused
                return None
        if exc is not None:
            return frame, exc
        if doom is not None:
            return frame, doom
        if frame.token is not None:
            saga.commit()
        return None

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        due = self._leave(exc)
        if due is None:
            return
        frame, exc = due
        cause, inner = _unwrap(exc, frame.saga)
        report = frame.saga.rollback(
            cause, savepoint=frame.savepoint, terminal=frame.token is not None
        )
        _raise(frame.saga, exc, cause, inner, report)

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        due = self._leave(exc)
        if due is None:
            return
        frame, exc = due
        cause, inner = _unwrap(exc, frame.saga)
        report = await frame.saga.arollback(
            cause, savepoint=frame.savepoint, terminal=frame.token is not None
        )
        _raise(frame.saga, exc, cause, inner, report)

    # -- decorator -----------------------------------------------------------------------------

    def _fresh(self) -> Transaction:
        return Transaction(self._runtime, self.name, resume=self._resume)

    def __call__(self, func: F) -> F:
        """Run ``func`` inside a fresh transaction per call (sync or async)."""
        if self.name is None:
            self.name = f"{func.__module__}.{func.__qualname__}".removeprefix("__main__.")
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_run(*args: Any, **kwargs: Any) -> Any:
                async with self._fresh():
                    return await func(*args, **kwargs)

            return cast(F, async_run)

        @functools.wraps(func)
        def run(*args: Any, **kwargs: Any) -> Any:
            with self._fresh():
                return func(*args, **kwargs)

        return cast(F, run)


def _unwrap(exc: BaseException, saga: Saga) -> tuple[BaseException, RollbackReport | None]:
    """The original cause, and the inner report when ``exc`` comes from a savepoint of ``saga``."""
    if isinstance(exc, SagaRolledBack) and exc.saga_id == saga.id:
        return exc.cause, exc.report
    return exc, None


def _raise(
    saga: Saga,
    exc: BaseException,
    cause: BaseException,
    inner: RollbackReport | None,
    report: RollbackReport,
) -> None:
    if inner is not None:
        report = report.merged(inner)
    if not isinstance(exc, Exception):
        exc.add_note(f"agent-saga: saga {saga.id} rolled back: {report.summary()}")
        return
    error = SagaRolledBack(saga.id, cause, report)
    raise error from cause
