"""Steps run ahead of confirmation, per saga: issuing their leases, redeeming them, discarding them.

:meth:`Speculation.speculate` runs a REVERSIBLE step now, as any step of the current saga (gate,
intent, body, outcome, all in the log), and returns a lease for it. The confirmed call is the
tool called again with the same arguments in the same saga, directly or through
:meth:`Speculation.redeem` with the lease: the saga's :class:`SagaLeases` (the engine's
:class:`~agent_saga._engine.ahead.AheadCalls`) checks the lease and, when it holds, marks it
spent durably and hands back the step's result; the call runs nothing and makes no new step.
Whatever does not hold (another argument, another saga, an expired, forged, truncated or spent
lease, a step a savepoint undid, a result no longer held in this process) yields nothing: a
``speculation.refused`` record gives the reason and the call runs normally.

When the saga ends, every step run ahead and never redeemed is discarded
(``speculation.discarded``): before a commit it is compensated now, if it has a compensation
(REVERSIBLE steps without one left no state); before a rollback the rollback undoes it.
"""

from __future__ import annotations

import os
import threading
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from ..._errors import SpeculationError
from ..._log.codec import CodecError, JSONValue, canonical
from ..._log.records import Kind, Semantics
from ..adapt import ToolCallGuard
from ..ahead import Claimed
from ..calls import call_to_completion
from ..compensation import compensator_kwargs
from ..rollback import comp_key, error_info
from ..runtime import Runtime
from ..saga import Saga, current_saga
from ..spec import ToolSpec
from ..steps import Step
from ..tool import tool_spec
from .keys import MAX_TTL, LeaseKeys
from .lease import (
    MAX_LEASE,
    Lease,
    LeaseClaims,
    Refused,
    args_digest,
    check,
    intent_digest,
    issue,
    lease_length,
)
from .spent import SpentLeases

__all__ = ["SagaLeases", "Speculation"]

_PRESENTED: ContextVar[list[object] | None] = ContextVar("agent_saga_lease", default=None)
"""The lease :meth:`Speculation.redeem` presents to the next call of a wrapped tool."""


@dataclass
class _Ahead:
    claims: LeaseClaims
    token: str
    step: Step
    result: Any
    closed: bool = False
    """Redeemed or discarded: never handed out again."""


def guard_of(tool: object) -> ToolCallGuard | None:
    """The guard of a framework tool that can run ahead (``guard`` and ``call_ahead``), if
    ``tool`` is one (see :mod:`agent_saga._engine.adapt`)."""
    guard = getattr(tool, "guard", None)
    if isinstance(guard, ToolCallGuard) and callable(getattr(tool, "call_ahead", None)):
        return guard
    return None


def call_arguments(spec: ToolSpec, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
    """The canonical JSON of a call's arguments by name, as a lease binds them.

    Raises:
        TypeError: they do not fit the tool's signature; CodecError: no canonical form.
    """
    given = dict(kwargs)
    if spec.accepts_idempotency_key:
        given.setdefault("idempotency_key", "")
    return canonical(spec.bind(args, given))


class SagaLeases:
    """One saga's steps run ahead (see the module docstring). Thread-safe."""

    def __init__(self, saga: Saga, owner: Speculation) -> None:
        self.saga = saga
        self.owner = owner
        self._ahead: dict[str, _Ahead] = {}
        self._lock = threading.Lock()

    def add(self, entry: _Ahead) -> None:
        with self._lock:
            self._ahead[entry.claims.nonce] = entry

    def _open_for(self, tool: str) -> list[_Ahead]:
        with self._lock:
            return [e for e in self._ahead.values() if not e.closed and e.claims.tool == tool]

    def claim(
        self, spec: ToolSpec, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Claimed | None:
        box = _PRESENTED.get()
        presented = box.pop() if box else None
        waiting = self._open_for(spec.name)
        if presented is None and not waiting:
            return None
        try:
            given = call_arguments(spec, args, kwargs)
        except (TypeError, CodecError):
            if presented is not None:
                self._refuse(spec.name, None, "the call's arguments have no canonical form")
            return None  # the step's own binding refuses a call that does not fit
        if presented is not None:
            return self._redeem(spec.name, presented, given)
        for entry in waiting:
            key = self.owner.keys.get(entry.claims.kid, self.owner.now())
            if key is not None and entry.claims.args == args_digest(key, given):
                return self._redeem(spec.name, entry.token, given)
        return None

    def _redeem(self, tool: str, lease: object, given: bytes) -> Claimed | None:
        owner = self.owner
        now = owner.now()
        verdict = check(lease, owner.keys, now, saga=self.saga.id, tool=tool, canonical_args=given)
        if isinstance(verdict, Refused):
            return self._refuse(tool, verdict.claims, verdict.reason)
        claims = verdict
        with self._lock:
            entry = self._ahead.get(claims.nonce)
        if owner.spent.is_spent(claims.nonce, claims.exp):
            return self._refuse(tool, claims, "already redeemed")
        if entry is None or entry.claims != claims:
            return self._refuse(tool, claims, "no result is held for it in this process")
        if entry.closed or entry.step.compensated:
            return self._refuse(tool, claims, "its step was discarded or undone")
        try:
            fresh = owner.spent.spend(claims.nonce, claims.exp, now)
        except OSError as exc:
            return self._refuse(tool, claims, f"cannot mark it redeemed durably: {exc}")
        if not fresh:
            return self._refuse(tool, claims, "already redeemed")
        if not self._take(entry):  # the saga ended meanwhile, in another thread
            return self._refuse(tool, claims, "its step was discarded or undone")
        data: dict[str, JSONValue] = {
            "ordinal": claims.ordinal,
            "tool": tool,
            "lease": claims.nonce,
        }
        self.saga.log(Kind.SPECULATION_REDEEMED, data, durable=False)
        return Claimed(entry.result)

    def _take(self, entry: _Ahead) -> bool:
        """Close ``entry`` for its redemption; ``False`` when it was closed already."""
        with self._lock:  # spent now: a later presentation is refused by its mark
            was_open = not entry.closed
            entry.closed = True
            self._ahead.pop(entry.claims.nonce, None)
        return was_open

    def _refuse(self, tool: str, claims: LeaseClaims | None, reason: str) -> Claimed | None:
        """Log why a lease yields nothing; the call then runs normally (returns ``None``)."""
        data: dict[str, JSONValue] = {"tool": tool, "reason": reason, "lease": None}
        if claims is not None:
            data["lease"] = claims.nonce
            if claims.saga == self.saga.id:  # the ordinal of a step of this saga
                data["ordinal"] = claims.ordinal
        self.saga.log(Kind.SPECULATION_REFUSED, data, durable=False)
        return None

    def discard(self, *, committed: bool) -> None:
        with self._lock:
            due = [e for e in self._ahead.values() if not e.closed]
            for entry in due:
                entry.closed = True
        for entry in due:
            step = entry.step
            if step.compensated or step.spec.compensation is None:
                undo = "nothing to undo"
            elif committed:
                undo = "undone now" if self._undo(step) else "undoing failed"
            else:
                undo = "undone by the rollback"
            data: dict[str, JSONValue] = {
                "ordinal": step.ref.ordinal,
                "tool": step.ref.tool,
                "lease": entry.claims.nonce,
                "undo": undo,
            }
            self.saga.log(Kind.SPECULATION_DISCARDED, data, durable=False)

    def _undo(self, step: Step) -> bool:
        """Compensate a discarded step before its saga commits (logged as any compensation)."""
        step.compensated = True
        ref = step.spec.compensation
        assert ref is not None
        func = ref.func if ref.name is None else self.saga.runtime.registry.get(ref.name)
        where: dict[str, JSONValue] = {"ordinal": step.ref.ordinal, "tool": step.ref.tool}
        intent = {**where, "compensation": ref.describe(), "idempotency_key": comp_key(step)}
        self.saga.log(Kind.COMP_INTENT, intent, durable=False)
        try:
            if func is None:
                raise LookupError(f"compensator {ref.name!r} is not registered")
            call_to_completion(
                func, compensator_kwargs(func, step.args, step.result, comp_key(step))
            )
        except Exception as exc:
            self.saga.log(Kind.COMP_FAILED, {**where, "error": error_info(exc)}, durable=False)
            return False
        self.saga.log(Kind.COMP_DONE, where, durable=False)
        return True


class Speculation:
    """A kit's speculation: its lease keys, its spent leases and its clock."""

    def __init__(
        self, runtime: Runtime, keys: LeaseKeys, spent: SpentLeases, *, ttl: float = 60.0
    ) -> None:
        self.runtime = runtime
        self.keys = keys
        self.spent = spent
        self.ttl = ttl
        self.now = runtime.clock.now

    def _saga(self, what: str) -> Saga:
        saga = current_saga()
        if saga is None:
            raise SpeculationError(f"{what} runs inside a transaction of this kit")
        if saga.runtime is not self.runtime:
            raise SpeculationError(f"{what} was called in another kit's transaction")
        return saga

    def leases(self, saga: Saga) -> SagaLeases:
        """The saga's table of steps run ahead (made on first use)."""
        with saga.lock:
            if not isinstance(saga.ahead, SagaLeases):
                saga.ahead = SagaLeases(saga, self)
            return saga.ahead

    def _spec(self, tool: object, *, is_async: bool, what: str) -> ToolSpec:
        spec = tool_spec(tool) if callable(tool) else None
        if spec is None and what == "speculate":
            guard = guard_of(tool)
            if guard is not None:  # a framework tool: it runs ahead sync or async alike
                return guard.spec
        if spec is None:
            raise SpeculationError(f"{what} takes a tool declared with @tool, got {tool!r}")
        if spec.is_async is not is_async:
            other = "aspeculate/aredeem" if spec.is_async else "speculate/redeem"
            raise SpeculationError(
                f"{spec.name} is {'async' if spec.is_async else 'sync'}: use {other}"
            )
        return spec

    def prepare(
        self,
        tool: object,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        ttl: float | None,
        *,
        is_async: bool,
    ) -> tuple[Saga, ToolSpec, bytes, float]:
        """Everything checked before a speculated step runs."""
        spec = self._spec(tool, is_async=is_async, what="speculate")
        saga = self._saga("speculate")
        if spec.semantics is not Semantics.REVERSIBLE:
            raise SpeculationError(
                f"only REVERSIBLE steps may run ahead of confirmation; {spec.name} is "
                f"{spec.semantics.value.upper()}"
            )
        if lease_length(saga.id, spec.name) > MAX_LEASE:
            raise SpeculationError(
                f"{spec.name}: the tool name and saga id are too long for a lease "
                f"(a lease holds at most {MAX_LEASE} characters)"
            )
        life = self.ttl if ttl is None else ttl
        if not 0 < life <= MAX_TTL:
            raise SpeculationError(f"a lease lives more than 0 and at most {MAX_TTL:g} seconds")
        try:
            given = call_arguments(spec, args, kwargs)
        except TypeError as exc:
            raise SpeculationError(f"{spec.name}: {exc}") from None
        except CodecError as exc:
            raise SpeculationError(f"{spec.name}: arguments a lease cannot bind: {exc}") from None
        return saga, spec, given, life

    def issue(
        self, saga: Saga, spec: ToolSpec, step: Step, result: Any, given: bytes, ttl: float
    ) -> Lease:
        """The lease for a step that ran ahead; it is logged and kept in the saga's table."""
        now = self.now()
        key = self.keys.current(now)
        digest = args_digest(key, given)
        ordinal = step.ref.ordinal
        intent = intent_digest(saga.id, ordinal, spec.name, step.ref.idempotency_key, digest)
        exp = int((now + ttl) * 1000)
        claims = LeaseClaims(
            key.kid, saga.id, spec.name, ordinal, intent, digest, exp, os.urandom(16).hex()
        )
        token = issue(key, claims)
        self.leases(saga).add(_Ahead(claims, token, step, result))
        data: dict[str, JSONValue] = {
            "ordinal": ordinal, "tool": spec.name, "lease": claims.nonce, "key_id": key.kid,
            "expires": exp, "intent": intent,
        }  # fmt: skip
        saga.log(Kind.SPECULATION_ISSUED, data, durable=False)
        return Lease(token, saga.id, spec.name, ordinal, key.kid, exp / 1000, claims.nonce)

    def present(self, tool: object, lease: object, *, is_async: bool) -> list[object]:
        """Make the saga check ``lease`` on the next call of ``tool``; returns the box to set."""
        self._spec(tool, is_async=is_async, what="redeem")
        self.leases(self._saga("redeem"))
        return [lease]


PRESENTED = _PRESENTED
