"""The per-step state a saga keeps, and the reservations taken for its steps."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable
from typing import Any

from .._gate.decisions import Hold, commit_all, release_all
from .._log.codec import JSONValue, is_restorable, to_jsonable
from .._log.records import Entry, Kind
from .report import StepRef
from .spec import ToolSpec


class Step:
    """A step that ran; mutable only to mark it compensated (at most once)."""

    __slots__ = ("args", "compensated", "ref", "result", "spec")

    def __init__(self, ref: StepRef, spec: ToolSpec, args: dict[str, Any]) -> None:
        self.ref = ref
        self.spec = spec
        self.args = args
        self.result: Any = None
        self.compensated = False


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

    def settle(self, from_ordinal: int, keep: set[int] | None) -> None:
        """Settle the reservations of steps from ``from_ordinal`` on.

        ``keep=None`` commits them all (the saga committed). Otherwise the steps were rolled
        back: reservations of steps in ``keep`` (whose compensation failed, so the effect
        stands) are committed, the others released.
        """
        with self._lock:
            due = [(o, h) for o, h in self._holds if o >= from_ordinal]
            self._holds = [(o, h) for o, h in self._holds if o < from_ordinal]
        spent = [h for o, h in due if keep is None or o in keep]
        undone = [h for o, h in due if keep is not None and o not in keep]
        errors = commit_all(spent) + release_all(undone)
        if errors:
            # The holds stay counted against their limits; a log failure here changes nothing.
            with contextlib.suppress(Exception):
                self._log(Kind.HOLD_UNSETTLED, {"errors": list(errors)}, durable=True)


class Doom:
    """A failure no exception carried to the transaction (see :meth:`Saga.doom`).

    ``cause`` is a plain attribute: every step reads it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.cause: Exception | None = None
        self._ordinal = 0

    def set(self, ordinal: int, cause: Exception) -> None:
        """Keep the first cause, with the ordinal of the last step before it."""
        with self._lock:
            if self.cause is None:
                self.cause, self._ordinal = cause, ordinal

    def take(self, from_ordinal: int) -> Exception | None:
        """The cause if it came at or after ``from_ordinal``; it is then cleared."""
        with self._lock:
            if self.cause is None or self._ordinal < from_ordinal:
                return None
            cause, self.cause = self.cause, None
            return cause
