"""The per-step state a saga keeps, the savepoint scopes steps run in, and the reservations
taken for them.

Savepoints are scopes, not ordinal ranges: a step records the savepoints open *in its own
thread or task* when it starts (:data:`SCOPES`, a context variable), so a savepoint that rolls
back compensates exactly the steps made inside it, even while other branches of the same saga
run concurrently under ``asyncio.gather`` or in threads.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from typing import Any

from .._gate.decisions import Hold, commit_all, release_all
from .._log.codec import JSONValue, is_restorable, to_jsonable
from .._log.records import Entry, Kind
from .report import StepRef
from .spec import ToolSpec

SCOPES: ContextVar[tuple[int, ...]] = ContextVar("agent_saga_scopes", default=())
"""The savepoints open in this thread or task, outermost first (saga-local numbers)."""


def in_scope(scopes: tuple[int, ...], savepoint: int | None) -> bool:
    """Whether something made under ``scopes`` belongs to ``savepoint`` (``None``: the saga)."""
    return savepoint is None or savepoint in scopes


class Step:
    """A step that ran (or raised); mutable only to mark it compensated (at most once).

    ``scopes`` are the savepoints that were open in the step's own thread or task when it
    started; ``raised`` is true for a step whose body raised (its effect may still have landed:
    rollback asks the tool's probe).
    """

    __slots__ = ("args", "compensated", "raised", "ref", "result", "scopes", "spec")

    def __init__(
        self, ref: StepRef, spec: ToolSpec, args: dict[str, Any], scopes: tuple[int, ...] = ()
    ) -> None:
        self.ref = ref
        self.spec = spec
        self.args = args
        self.scopes = scopes
        self.result: Any = None
        self.compensated = False
        self.raised = False


class PreparedCall:
    __slots__ = ("call_args", "call_kwargs", "compensation", "intent", "step")

    def __init__(
        self,
        step: Step,
        call_kwargs: dict[str, Any],
        call_args: tuple[Any, ...],
        compensation: Callable[..., Any] | None,
        intent: Entry | None,
    ) -> None:
        self.step = step
        self.call_kwargs = call_kwargs
        self.call_args = call_args
        self.compensation = compensation
        self.intent = intent
        """A fast-path intent not yet buffered: it joins the buffer with the step's outcome."""


_SCALARS = frozenset({str, int, float, bool, type(None)})


def done_record(step: Step, result: Any) -> dict[str, JSONValue]:
    """The data of a ``step.done`` record (``result_restorable``: recovery can hand the logged
    result back to a compensator as it was)."""
    stored = to_jsonable(result)
    return {
        "ordinal": step.ref.ordinal,
        "tool": step.ref.tool,
        "result": stored,
        "result_restorable": type(stored) in _SCALARS or is_restorable(stored),
    }


class StepHolds:
    """Reservations (budgets) taken for a saga's steps, settled when the saga or a savepoint
    ends. Empty (falsy) for sagas without reserving rules, so the engine skips it.

    A settlement that fails leaves the reservation counted against its limit and is logged
    (``gate.hold_unsettled``) through ``log``, the saga's own.
    """

    def __init__(self, log: Callable[..., None]) -> None:
        self._lock = threading.Lock()
        self._holds: list[tuple[int, Hold]] = []
        self._log = log

    def __bool__(self) -> bool:
        return bool(self._holds)

    def add(self, ordinal: int, holds: Iterable[Hold]) -> None:
        with self._lock:
            self._holds.extend((ordinal, hold) for hold in holds)

    def release(self, ordinal: int) -> None:
        """Give back the reservations of one step whose effect did not happen."""
        with self._lock:
            due = [h for o, h in self._holds if o == ordinal]
            self._holds = [(o, h) for o, h in self._holds if o != ordinal]
        errors = release_all(due)
        if errors:
            self._log(Kind.HOLD_UNSETTLED, {"errors": list(errors)}, durable=False)

    def settle(self, ordinals: set[int] | None, keep: set[int] | None) -> None:
        """Settle the reservations of the steps in ``ordinals`` (``None``: every step).

        ``keep=None`` commits them all (the saga committed). Otherwise the steps were rolled
        back: reservations of steps in ``keep`` (whose compensation failed, so the effect
        stands) are committed, the others released.
        """
        with self._lock:
            due = [(o, h) for o, h in self._holds if ordinals is None or o in ordinals]
            self._holds = [
                (o, h) for o, h in self._holds if not (ordinals is None or o in ordinals)
            ]
        spent = [h for o, h in due if keep is None or o in keep]
        undone = [h for o, h in due if keep is not None and o not in keep]
        errors = commit_all(spent) + release_all(undone)
        if errors:
            # The holds stay counted against their limits; a log failure here changes nothing.
            with contextlib.suppress(Exception):
                self._log(Kind.HOLD_UNSETTLED, {"errors": list(errors)}, durable=True)


class Doom:
    """Failures no exception carried to the transaction (see :meth:`Saga.doom`).

    A doom belongs to the savepoint scopes open where it was raised: it refuses the later steps
    made inside those scopes (other branches go on), and the innermost savepoint that contains
    it takes it when it ends; the saga's own end takes every doom. ``cause`` (the first pending
    doom, or ``None``) is a plain attribute: every step reads it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.cause: Exception | None = None
        self._pending: list[tuple[tuple[int, ...], Exception]] = []
        self._deferred: dict[str, tuple[tuple[int, ...], Exception]] = {}

    def defer(self, key: str, scopes: tuple[int, ...], cause: Exception) -> None:
        """A failure that dooms its scope when that scope ends, unless :meth:`resolve` is called
        first (a retryable step that is retried and succeeds). It refuses no later step."""
        with self._lock:
            self._deferred[key] = (scopes, cause)

    def resolve(self, key: str) -> None:
        """The deferred failure ``key`` was retried and succeeded: it dooms nothing."""
        with self._lock:
            self._deferred.pop(key, None)

    def set(self, scopes: tuple[int, ...], cause: Exception) -> None:
        """Record a doom raised under ``scopes`` (the first per scope is the one reported)."""
        with self._lock:
            if all(own != scopes for own, _ in self._pending):
                self._pending.append((scopes, cause))
            self.cause = self._pending[0][1]

    def refuses(self, scopes: tuple[int, ...]) -> Exception | None:
        """The cause that refuses a step made under ``scopes``: a doom of an enclosing scope."""
        for own, cause in self._pending:
            if scopes[: len(own)] == own:
                return cause
        return None

    def take(self, savepoint: int | None) -> Exception | None:
        """The first doom that belongs to ``savepoint`` (``None``: the saga); the dooms that
        belong to it are then cleared."""
        with self._lock:
            if not self._pending and not self._deferred:  # nearly always: nothing failed
                return None
            mine = [cause for own, cause in self._pending if in_scope(own, savepoint)]
            self._pending = [(o, c) for o, c in self._pending if not in_scope(o, savepoint)]
            self.cause = self._pending[0][1] if self._pending else None
            unresolved = {k: v for k, v in self._deferred.items() if in_scope(v[0], savepoint)}
            for key in unresolved:
                del self._deferred[key]
            mine += [cause for _, cause in unresolved.values()]
            return mine[0] if mine else None
