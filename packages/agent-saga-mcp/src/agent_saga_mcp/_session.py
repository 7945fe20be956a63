"""One client session's sagas: the implicit session saga and the ones the model brackets.

The core keeps the current saga in a context variable, set when a transaction is entered and
reset, in that same context, when it is left. An MCP session's calls arrive as separate tasks,
so each saga gets a :class:`contextvars.Context` of its own: the transaction is entered inside
it, every step of the saga runs in it (inside the calling task, see :meth:`SagaSlot.run`),
and the transaction is left inside it (which commits, or compensates newest first). A session
runs one call at a time (its lock), so a context is never entered twice at once, and steps keep
the order their calls arrived in.

Transaction boundaries, as the gateway draws them:

* The first gated call with no saga open opens the session's implicit saga; a clean end of the
  session commits it.
* ``saga_begin`` commits the implicit saga if one is open, then opens an explicit one;
  ``saga_commit`` and ``saga_rollback`` end whichever saga is open. A session that ends with an
  explicit saga still open rolls it back (like a database connection closed mid-transaction).
* A failed step (an upstream error result, a failed call) or a halt ends the open saga at once:
  it is rolled back before the failing call's result is returned, so the model learns what was
  undone. The next call opens a new implicit saga.
* A session that does not end cleanly (the gateway is stopped) rolls its open saga back; one
  that is killed leaves it to ``agent-saga recover``.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine, Generator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from agent_saga import AgentKit, RollbackReport, Saga, SagaRolledBack, Transaction

T = TypeVar("T")


@dataclass
class StepNote:
    """A step the session made, for ``saga_status``."""

    ordinal: int
    tool: str
    outcome: str


@dataclass
class SagaSlot:
    """One open saga: its transaction, the context it runs in, the steps made so far."""

    transaction: Transaction
    context: contextvars.Context
    saga: Saga
    explicit: bool
    steps: list[StepNote] = field(default_factory=list)
    report: RollbackReport | None = None
    """How the saga was rolled back, once :meth:`finish` has rolled it back."""

    @classmethod
    def open(cls, kit: AgentKit, name: str, *, explicit: bool) -> SagaSlot:
        """Begin a saga in a fresh context.

        Raises:
            agent_saga.HaltedError: the kill switch is set; no saga was begun.
        """
        transaction = kit.transaction(name)
        context = contextvars.Context()
        saga = context.run(transaction.__enter__)
        return cls(transaction, context, saga, explicit)

    async def run(self, step: Coroutine[Any, Any, T]) -> T:
        """Run ``step`` in this saga's context (current_saga() is this saga), in the caller's
        task: no task of its own (one loop iteration fewer per call), the same context a task
        created in it would run in."""
        return await _InContext(step, self.context)

    async def finish(self, cause: BaseException | None = None) -> RollbackReport | None:
        """Leave the transaction: commit, or roll back when ``cause`` is given or a step doomed
        the saga. Returns the rollback's report, ``None`` on commit.

        The end record is durable on return. Shielded: a cancelled caller does not stop a
        rollback halfway (the task still finishes).
        """
        exc_type = type(cause) if cause is not None else None
        leaving = self.transaction.__aexit__(exc_type, cause, None)
        task = asyncio.get_running_loop().create_task(leaving, context=self.context)
        try:
            await asyncio.shield(task)
        except SagaRolledBack as rolled_back:
            self.report = rolled_back.report
        # A cancellation as the cause is rolled back too; the core then adds the report to the
        # exception as a note and raises nothing here.
        return self.report

    def describe(self) -> dict[str, Any]:
        return {
            "saga": self.saga.id,
            "name": self.saga.name,
            "explicit": self.explicit,
            "steps": [
                {"ordinal": s.ordinal, "tool": s.tool, "outcome": s.outcome} for s in self.steps
            ],
        }


class _InContext(Generic[T]):
    """Awaiting this runs ``coroutine`` inside ``context``, in the awaiting task: each of its
    steps is ``context.run(coroutine.send, ...)``, and what it waits on is waited on by the
    awaiting task (a cancellation of that task is thrown into it, as into an awaited task)."""

    __slots__ = ("context", "coroutine")

    def __init__(self, coroutine: Coroutine[Any, Any, T], context: contextvars.Context) -> None:
        self.coroutine = coroutine
        self.context = context

    def __await__(self) -> Generator[Any, Any, T]:
        run, coroutine = self.context.run, self.coroutine
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                if error is None:
                    waited = run(coroutine.send, value)
                else:
                    waited, error = run(coroutine.throw, error), None
            except StopIteration as returned:
                return returned.value  # type: ignore[no-any-return]
            try:
                value = yield waited
            except BaseException as thrown:  # a cancellation (or anything thrown in): pass it on
                value, error = None, thrown


class SessionSagas:
    """The sagas of one client session (see the module docstring)."""

    def __init__(self, kit: AgentKit, saga_name: str) -> None:
        self.kit = kit
        self.saga_name = saga_name
        self.lock = asyncio.Lock()
        self.slot: SagaSlot | None = None
        self.last: dict[str, Any] | None = None
        """The last saga this session ended: id, name, status (and what was compensated)."""
        self.closed = False

    def current(self) -> SagaSlot:
        """The open saga, opening the implicit one if none is (call with :attr:`lock` held).

        Raises:
            agent_saga.HaltedError: no saga is open and the kill switch is set.
        """
        if self.slot is None:
            self.slot = SagaSlot.open(self.kit, self.saga_name, explicit=False)
        return self.slot

    async def begin(self, name: str | None) -> tuple[SagaSlot, dict[str, Any] | None]:
        """Commit an open implicit saga, then open an explicit one (lock held).

        Returns the new slot and the ended implicit saga's summary (or ``None``).

        Raises:
            ValueError: an explicit saga is already open.
            agent_saga.HaltedError: the kill switch is set.
        """
        ended = None
        if self.slot is not None:
            if self.slot.explicit:
                raise ValueError(
                    f"saga {self.slot.saga.id} is already open: commit or roll it back first"
                )
            ended = await self.end_saga(None)
        self.slot = SagaSlot.open(self.kit, name or self.saga_name, explicit=True)
        return self.slot, ended

    async def end_saga(self, cause: BaseException | None) -> dict[str, Any] | None:
        """End the open saga (commit, or roll back with ``cause``); its summary, or ``None``
        when no saga was open (lock held)."""
        slot = self.slot
        if slot is None:
            return None
        self.slot = None
        report = await slot.finish(cause)
        summary: dict[str, Any] = {"saga": slot.saga.id, "name": slot.saga.name}
        summary["status"] = slot.saga.status.value
        summary["steps"] = len(slot.steps)
        if report is not None:
            summary["compensated"] = [r.ordinal for r in report.compensated]
            summary["failed"] = [f.step.ordinal for f in report.failed]
        self.last = summary
        return summary

    async def end_session(
        self, *, clean: bool, why: str = "the gateway stopped"
    ) -> dict[str, Any] | None:
        """The client session is over: commit its implicit saga if it ended cleanly, roll back
        otherwise (``why`` says why), and always roll back an explicit saga left open."""
        async with self.lock:
            self.closed = True
            slot = self.slot
            if slot is None:
                return None
            if clean and not slot.explicit:
                return await self.end_saga(None)
            if slot.explicit:
                why = "the session ended before saga_commit"
            return await self.end_saga(SessionEnded(why))


class SessionEnded(Exception):
    """Why a session's open saga was rolled back when the session ended."""


__all__ = ["SagaSlot", "SessionEnded", "SessionSagas", "StepNote"]
