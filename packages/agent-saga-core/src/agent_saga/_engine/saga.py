"""A running saga: gated, logged steps and their reverse-order compensation.

Order of work for one step (the write-ahead rule):

1. bind the arguments, assign the next ordinal and the step's idempotency key;
2. the kill switch and the gate decide; a refusal is logged and raised, the body never runs;
3. the intent (tool, arguments, declared compensation, key) is logged, and for COMPENSABLE and
   IRREVERSIBLE steps made durable before the body runs;
4. the body runs; its outcome (result or error) is logged.

A saga's terminal record is durable before the transaction that owns it returns.
"""

from __future__ import annotations

import hashlib
import itertools
import os
from contextvars import ContextVar
from typing import Any

from .._log.codec import JSONValue, is_flat, snapshot, to_jsonable
from .._log.forks import process_id
from .._log.records import Entry, Kind, SagaStatus, Semantics
from .._log.redaction import AT_WRITE, mask
from .admission import SagaAdmission
from .compensation import validate_callable_compensation
from .report import RollbackReport, StepRef
from .rollback import aroll_back, error_info, roll_back
from .runtime import Runtime
from .spec import ToolSpec
from .steps import SCOPES, PreparedCall, Step, done_record
from .suspend import check_suspendable, write_suspended

_HOST = os.uname().nodename
_tuple = tuple.__new__
"""Builds the step's named tuples (StepRef, Entry) without their Python-level ``__new__``: the
step path makes three per call."""
_CURRENT: ContextVar[Saga | None] = ContextVar("agent_saga_current", default=None)
_SCOPE_IDS = itertools.count(1)
"""Savepoint scope ids, unique in the process (``next`` on a count is atomic in CPython)."""


def current_saga() -> Saga | None:
    """The saga of the innermost open transaction in this thread or task, or ``None``."""
    return _CURRENT.get()


def idempotency_key(saga_id: str, ordinal: int, tool: str) -> str:
    """The deterministic key of step ``(saga_id, ordinal, tool)``."""
    digest = hashlib.sha256(f"{saga_id}\x00{ordinal}\x00{tool}".encode()).hexdigest()
    return f"as1-{digest[:32]}"


class Saga(SagaAdmission):
    """One transaction's running saga. Created by a transaction; not meant to be built directly."""

    def __init__(self, runtime: Runtime, saga_id: str, name: str) -> None:
        super().__init__(runtime, saga_id, name)
        self._ordinal = 0
        self._savepoints = 0
        self._key_prefix = hashlib.sha256(f"{saga_id}\x00".encode())
        self._add_tool = runtime.tools.add
        self.suspending: tuple[float | None] | None = None
        """Set by :meth:`suspend`: ``(expires_after,)``."""

    def begin(self) -> None:
        if self.events is not None:
            self.events.saga_begin(self)
        self.log(
            Kind.SAGA_BEGIN,
            {
                "name": self.name,
                "pid": process_id(),
                "host": _HOST,
                "owner": self.runtime.store.owner_id,
            },
            durable=False,
        )

    def commit(self) -> None:
        """Write the terminal ``committed`` record durably."""
        self.end_ahead(committed=True)
        self.status = SagaStatus.COMMITTED
        try:
            self.log(
                Kind.SAGA_END,
                {"status": self.status.value, "steps": len(self.steps)},
                durable=True,
            )
        except BaseException as exc:
            if self.events is not None:
                self.events.saga_end(self, exc)
            raise
        if self.holds:
            self.holds.settle(None, keep=None)
        if self.events is not None:
            self.events.saga_end(self, None)

    def suspend(self, *, expires_after: float | None = None) -> None:
        """Leave this saga open when its transaction's block ends normally, to be resumed by
        id in a later request or another process (``kit.transaction(resume=saga.id)``).

        Leaving the block then writes a durable ``saga.suspended`` record instead of committing
        and releases the saga: recovery leaves it alone until it is resumed, or, with
        ``expires_after`` (seconds), until that time has passed, after which recovery rolls it
        back. An exception or a doomed step in the block still rolls it back.

        Raises:
            ConfigurationError: ``expires_after`` is not positive, or a step of the saga is
                compensated by an in-process callable, which no later process can run.
        """
        self.suspending = (check_suspendable(self, expires_after),)

    def write_suspended(self) -> None:
        """Write the durable ``saga.suspended`` record (see :meth:`suspend`)."""
        write_suspended(self, self._ordinal + 1, self.suspending[0] if self.suspending else None)

    # -- steps -----------------------------------------------------------------------------

    def _prepare(
        self, spec: ToolSpec, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> PreparedCall:
        if self.closed is not None:
            self.check_open(spec.name)
        self._add_tool(spec)
        with self.lock:
            self._ordinal += 1
            ordinal = self._ordinal
        key = kwargs.get("idempotency_key") or self._step_key(ordinal, spec.name)
        call_kwargs = dict(kwargs)
        if spec.accepts_idempotency_key and "idempotency_key" not in kwargs:
            call_kwargs["idempotency_key"] = key
        ref = _tuple(StepRef, (ordinal, spec.name, key))
        obs = self.events
        if obs is None:
            return self._admit(spec, ref, args, kwargs, call_kwargs)
        obs.step_begin(self, ref, spec.semantics)
        try:
            return self._admit(spec, ref, args, kwargs, call_kwargs)
        except BaseException as exc:  # refused, or the intent could not be logged
            obs.step_end(self, ref, exc)
            raise

    def _admit(
        self,
        spec: ToolSpec,
        ref: StepRef,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        call_kwargs: dict[str, Any],
    ) -> PreparedCall:
        """Gate step ``ref`` and log its intent (buffered on the fast path).

        The tool receives exactly the values that were gated, approved and logged: arguments
        holding built-in containers are copied once (:func:`snapshot`) before anything looks at
        them, so a caller (or another thread) changing its own dict afterwards changes nothing.
        """
        ordinal, key = ref.ordinal, ref.idempotency_key
        try:
            named = spec.bind(args, call_kwargs)
            flat = is_flat(named)
            if not flat:
                memo: dict[int, Any] = {}
                args = tuple(snapshot(value, memo) for value in args)
                call_kwargs = {name: snapshot(value, memo) for name, value in call_kwargs.items()}
                named = spec.bind(args, call_kwargs)
        except TypeError as exc:
            given = AT_WRITE if spec.redact else to_jsonable({"args": args, "kwargs": kwargs})
            self._refuse(ref, spec, given, "signature", str(exc))
        step = Step(ref, spec, named, SCOPES.get())
        # The dict is ours (bind made it): when it holds plain scalars it is stored as is.
        jsonable_args = named if flat else to_jsonable(named)
        if spec.redact:  # never logged in plaintext; the gate still sees step.args
            jsonable_args = mask(jsonable_args, spec.redact)[0]
        compensation = self._gate(step, jsonable_args)
        intent: dict[str, JSONValue] = {
            "ordinal": ordinal,
            "tool": spec.name,
            "semantics": spec.semantics_value,
            "args": jsonable_args,
            "compensation": spec.compensation_json,
            "idempotency_key": key,
        }
        if self.fast_path and not spec.durable_intent:
            # Buffered either way: it joins the buffer together with the outcome, in order.
            if self.events is not None:
                self.events.stamp(intent)
            entry = _tuple(Entry, (Kind.STEP_INTENT, self.id, intent, int(self.now() * 1000)))
            return PreparedCall(step, call_kwargs, args, compensation, entry)
        try:
            self.log(Kind.STEP_INTENT, intent, durable=spec.durable_intent)
        except BaseException:
            if self.holds:  # the effect will not run: its reservation goes back
                self.holds.release(ordinal)
            raise
        return PreparedCall(step, call_kwargs, args, compensation, None)

    def _step_key(self, ordinal: int, tool: str) -> str:
        """:func:`idempotency_key` of this saga's step, from a pre-hashed saga id."""
        hasher = self._key_prefix.copy()
        hasher.update(f"{ordinal}\x00{tool}".encode())
        return f"as1-{hasher.hexdigest()[:32]}"

    def _done(self, prepared: PreparedCall, result: Any) -> None:
        step = prepared.step
        step.result = result
        if step.raised:  # a retry of a step whose body raised: it took effect after all
            step.raised = False
            with self.lock:
                self.raised.remove(step)
        done = done_record(step, result)
        obs = self.events
        if prepared.intent is not None:  # fast path: intent and outcome join the buffer
            if obs is not None:
                obs.stamp(done)
            entry = _tuple(Entry, (Kind.STEP_DONE, self.id, done, int(self.now() * 1000)))
            with self.lock:
                self.steps.append(step)
                self.pending += (prepared.intent, entry)
            if obs is not None:
                obs.step_end(self, step.ref, None)
            return
        with self.lock:
            self.steps.append(step)
        self.log(Kind.STEP_DONE, done, durable=False, flush=step.spec.durable_intent)
        if self.events is not None:
            self.events.step_end(self, step.ref, None)

    def _failed(
        self, prepared: PreparedCall, exc: BaseException, *, retryable: bool = False
    ) -> None:
        """Record that the step's body raised (``retryable``: the same step may run again).

        A step that may be retried keeps its budget reservation until its saga ends.
        """
        step = prepared.step
        if self.holds and not retryable:  # a step whose tool raised is taken to have had no effect
            self.holds.release(step.ref.ordinal)
        if step.spec.durable_intent and not step.raised:  # its effect may have landed: a
            step.raised = True  # rollback asks the probe
            with self.lock:
                self.raised.append(step)
        if prepared.intent is not None:
            with self.lock:
                self.pending.append(prepared.intent)
            prepared.intent = None  # buffered once, even if the step is retried
        data: dict[str, JSONValue] = {
            "ordinal": step.ref.ordinal,
            "tool": step.ref.tool,
            "error": error_info(exc),
        }
        if retryable:
            data["retryable"] = True
        self.log(Kind.STEP_FAILED, data, durable=False, flush=step.spec.durable_intent)
        if self.events is not None:
            self.events.step_end(self, step.ref, exc)

    def run_sync(self, spec: ToolSpec, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run a sync tool as a step of this saga."""
        prepared = self._prepare(spec, args, kwargs)
        try:
            result = spec.func(*prepared.call_args, **prepared.call_kwargs)
        except BaseException as exc:
            self._failed(prepared, exc)
            raise
        self._done(prepared, result)
        return result

    async def run_async(self, spec: ToolSpec, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run an async tool as a step of this saga."""
        if self.runtime.approvals is None:
            prepared = self._prepare(spec, args, kwargs)
        else:  # a human may have to decide: wait in a thread, not on the event loop
            import asyncio  # the running loop has loaded it already

            prepared = await asyncio.to_thread(self._prepare, spec, args, kwargs)
        try:
            result = await spec.func(*prepared.call_args, **prepared.call_kwargs)
        except BaseException as exc:
            self._failed(prepared, exc)
            raise
        self._done(prepared, result)
        return result

    def park(self, key: str, prepared: PreparedCall, *, paused: bool) -> None:
        """Keep a call to be continued as the same step by a later call with ``key``."""
        with self.lock:
            self.parked.setdefault(key, []).append((prepared, paused))

    def unpark(self, key: str) -> PreparedCall | None:
        """The oldest call parked under ``key``, now to be continued (``None``: none)."""
        with self.lock:
            waiting = self.parked.get(key)
            if not waiting:
                return None
            prepared, _ = waiting.pop(0)
            if not waiting:
                del self.parked[key]
            return prepared

    def abandon_parked(self) -> None:
        """Log the calls paused and never continued as failed (their body never finished)."""
        with self.lock:
            paused = [p for calls in self.parked.values() for p, waiting in calls if waiting]
            self.parked = {}
        for prepared in paused:
            self._failed(prepared, RuntimeError("paused and never resumed before the saga ended"))

    def _rejected(self, prepared: PreparedCall, exc: BaseException) -> None:
        """The framework refused the call's arguments before the tool's body ran: logged as a
        refusal (rule ``arguments``); nothing ran, so nothing is doomed."""
        step = prepared.step
        if self.holds:
            self.holds.release(step.ref.ordinal)
        if prepared.intent is not None:
            with self.lock:
                self.pending.append(prepared.intent)
            prepared.intent = None
        reason = f"{type(exc).__name__}: {exc}"[:2000]
        data: dict[str, JSONValue] = {
            "ordinal": step.ref.ordinal,
            "tool": step.ref.tool,
            "rule": "arguments",
            "reason": reason,
        }
        self.log(Kind.GATE_REFUSED, data, durable=False, flush=step.spec.durable_intent)
        if self.events is not None:
            self.events.step_end(self, step.ref, exc)

    def doom(self, cause: Exception) -> None:
        """Mark the saga failed although no exception reached its transaction.

        Agent frameworks turn a tool's exception into text for the model and carry on; their
        adapters call this so that the transaction rolls back when it ends (raising
        :class:`SagaRolledBack`) instead of committing. Like a database transaction after an
        error, every later step made in the same scope is refused (a doom raised inside a
        savepoint refuses that savepoint's later steps; other concurrent branches go on).
        """
        self._doom.set(SCOPES.get(), cause)

    def doom_unless_retried(self, key: str, cause: Exception) -> None:
        """:meth:`doom` when the current scope ends, unless the call parked under ``key`` is
        retried and succeeds first (:meth:`retried`); later steps are not refused meanwhile."""
        self._doom.defer(key, SCOPES.get(), cause)

    def retried(self, key: str) -> None:
        """The call parked under ``key`` was retried and succeeded."""
        self._doom.resolve(key)

    def take_doom(self, savepoint: int | None) -> Exception | None:
        """The doom that belongs to ``savepoint`` (``None``: the saga), which is then cleared."""
        return self._doom.take(savepoint)

    # -- savepoints and rollback -------------------------------------------------------------

    def savepoint(self) -> int:
        """Open a nested scope and log it; returns its scope id (see :data:`SCOPES`).

        The caller makes the id current in its own thread or task; the steps made there
        belong to the savepoint.
        """
        scope = next(_SCOPE_IDS)
        with self.lock:
            self._savepoints += 1
            first = self._ordinal + 1
            number = self._savepoints
            self.savepoints[scope] = (number, first)
        self.log(Kind.SAVEPOINT_BEGIN, {"savepoint": number, "from_ordinal": first}, durable=False)
        return scope

    def rollback(
        self, cause: BaseException, *, savepoint: int | None = None, terminal: bool = True
    ) -> RollbackReport:
        """Compensate the committed steps of ``savepoint`` (``None``: of the whole saga),
        newest first, each at most once.

        A failing compensation is recorded and the rest still run; the saga then ends
        ``needs_human``. With ``terminal``, the saga's end record is durable on return.
        """
        self.end_ahead(committed=False, ending=terminal)
        return roll_back(self, cause, savepoint, terminal)

    async def arollback(
        self, cause: BaseException, *, savepoint: int | None = None, terminal: bool = True
    ) -> RollbackReport:
        """:meth:`rollback` for async transactions: async compensators are awaited."""
        self.end_ahead(committed=False, ending=terminal)
        return await aroll_back(self, cause, savepoint, terminal)


__all__ = [
    "Saga",
    "Semantics",
    "PreparedCall",
    "Step",
    "current_saga",
    "idempotency_key",
    "validate_callable_compensation",
]
