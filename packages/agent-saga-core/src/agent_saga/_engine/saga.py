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
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, NoReturn

from .._errors import ArgumentsRefused, GateRefused, HaltedError
from .._gate.decisions import Deny, RequireApproval, ToolCall
from .._log.codec import JSONValue, is_flat, snapshot, to_jsonable
from .._log.records import Entry, Kind, SagaStatus, Semantics
from .._log.redaction import AT_WRITE, mask
from .approval import ask_approval
from .compensation import resolve_compensator, validate_callable_compensation
from .report import RollbackReport, StepRef
from .rollback import aroll_back, error_info, roll_back
from .runtime import Runtime
from .spec import ToolSpec
from .state import SagaState
from .steps import SCOPES, Doom, PreparedCall, Step, done_record

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


class Saga(SagaState):
    """One transaction's running saga. Created by a transaction; not meant to be built directly."""

    def __init__(self, runtime: Runtime, saga_id: str, name: str) -> None:
        super().__init__(runtime, saga_id, name)
        self._ordinal = 0
        self._savepoints = 0
        self._doom = Doom()
        self._key_prefix = hashlib.sha256(f"{saga_id}\x00".encode())
        self._add_tool = runtime.tools.add
        self._halt_state = runtime.kill_switch.state
        self._gatekeeper = runtime.gate

    def begin(self) -> None:
        if self.events is not None:
            self.events.saga_begin(self)
        self.log(
            Kind.SAGA_BEGIN,
            {
                "name": self.name,
                "pid": os.getpid(),
                "host": _HOST,
                "owner": self.runtime.store.owner_id,
            },
            durable=False,
        )

    def commit(self) -> None:
        """Write the terminal ``committed`` record durably."""
        if self.ahead is not None:
            self.ahead.discard(committed=True)
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

    # -- steps -----------------------------------------------------------------------------

    def _prepare(
        self, spec: ToolSpec, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> PreparedCall:
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
            self._refuse(ref, given, "signature", str(exc))
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

    def _gate(self, step: Step, jsonable_args: JSONValue) -> Callable[..., Any] | None:
        """Decide on the call; returns the resolved compensator. Raises on any refusal."""
        spec, ref = step.spec, step.ref
        owner = spec.owner
        if owner is not None and owner is not self.runtime.tools:
            reason = (
                f"it was declared on kit {owner.label!r} but called in a transaction of kit "
                f"{self.runtime.tools.label!r}; a tool runs only under its own kit's gate, "
                "kill switch and log"
            )
            self._refuse(ref, jsonable_args, "kit", reason)
        halt = self._halt_state()
        if halt.halted:
            self._refuse(ref, jsonable_args, "kill_switch", halt.reason)
        if self._doom.cause is not None:
            cause = self._doom.refuses(step.scopes)
            if cause is not None:
                reason = f"an earlier step failed ({type(cause).__name__}: {cause}); rolling back"
                self._refuse(ref, jsonable_args, "saga_failed", reason)
        gate = self._gatekeeper
        if not gate.rules and spec.semantics is not Semantics.IRREVERSIBLE:
            if spec.compensation is None:  # no compensation to resolve
                return None
            return self._resolve_compensation(step, jsonable_args)  # nothing could refuse it
        call = ToolCall(
            spec.name, spec.semantics, step.args, self.id, ref.ordinal, spec, self._gate_record
        )
        decision = gate.evaluate(call)
        if isinstance(decision, Deny):
            self._refuse(ref, jsonable_args, decision.rule, decision.reason)
        if isinstance(decision, RequireApproval):
            denied = ask_approval(self, step, decision, jsonable_args)
            if denied is not None:
                self._refuse(ref, jsonable_args, *denied)
        compensation = self._resolve_compensation(step, jsonable_args)
        if gate.reservers:  # last: a reservation is taken only for a call that will run
            holds, refusal = gate.reserve(call)
            if refusal is not None:
                self._refuse(ref, jsonable_args, refusal.rule, refusal.reason)
            self.holds.add(ref.ordinal, holds)
        return compensation

    def _gate_record(self, kind: str, data: dict[str, JSONValue]) -> None:
        """Lets a rule log into this saga (a validator's vote), buffered with the step."""
        self.log(Kind(kind), data, durable=False)

    def _resolve_compensation(
        self, step: Step, jsonable_args: JSONValue
    ) -> Callable[..., Any] | None:
        spec = step.spec
        func, problem = resolve_compensator(
            spec.compensation, spec.signature.parameters, self.runtime.registry
        )
        if problem is not None:
            self._refuse(step.ref, jsonable_args, "compensation", problem)
        return func

    def _refuse(self, ref: StepRef, args: JSONValue, rule: str, reason: str) -> NoReturn:
        if self.events is not None:
            self.events.gate_refused(self, ref, rule, reason)
        self.log(
            Kind.GATE_REFUSED,
            {
                "ordinal": ref.ordinal,
                "tool": ref.tool,
                "rule": rule,
                "reason": reason,
                "args": args,
            },
            durable=False,
        )
        if rule == "kill_switch":
            raise HaltedError(ref.tool, reason)
        if rule == "signature":
            raise ArgumentsRefused(ref.tool, rule, reason)
        raise GateRefused(ref.tool, rule, reason)

    def _done(self, prepared: PreparedCall, result: Any) -> None:
        step = prepared.step
        step.result = result
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

    def _failed(self, prepared: PreparedCall, exc: BaseException) -> None:
        step = prepared.step
        if self.holds:  # a step whose tool raised is taken to have had no effect
            self.holds.release(step.ref.ordinal)
        if step.spec.durable_intent:  # its effect may have landed: a rollback asks the probe
            step.raised = True
            with self.lock:
                self.raised.append(step)
        if prepared.intent is not None:
            with self.lock:
                self.pending.append(prepared.intent)
        self.log(
            Kind.STEP_FAILED,
            {"ordinal": step.ref.ordinal, "tool": step.ref.tool, "error": error_info(exc)},
            durable=False,
            flush=step.spec.durable_intent,
        )
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

    def doom(self, cause: Exception) -> None:
        """Mark the saga failed although no exception reached its transaction.

        Agent frameworks turn a tool's exception into text for the model and carry on; their
        adapters call this so that the transaction rolls back when it ends (raising
        :class:`SagaRolledBack`) instead of committing. Like a database transaction after an
        error, every later step made in the same scope is refused (a doom raised inside a
        savepoint refuses that savepoint's later steps; other concurrent branches go on).
        """
        self._doom.set(SCOPES.get(), cause)

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
        if terminal and self.ahead is not None:
            self.ahead.discard(committed=False)
        return roll_back(self, cause, savepoint, terminal)

    async def arollback(
        self, cause: BaseException, *, savepoint: int | None = None, terminal: bool = True
    ) -> RollbackReport:
        """:meth:`rollback` for async transactions: async compensators are awaited."""
        if terminal and self.ahead is not None:
            self.ahead.discard(committed=False)
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
