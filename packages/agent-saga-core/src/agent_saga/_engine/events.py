"""The engine's side of observers: who is registered, and the fan-out a saga calls.

The public base class of observers (:class:`~agent_saga.Observer`, in ``observe.py``) is typed
with the saga it reports on; this module sits below the saga, so it knows observers only by
the :class:`SagaObserver` protocol, whose ``saga`` arguments are untyped. See ``observe.py`` for
the events, their order against the log and what observers may assume.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from .._log.records import Semantics
from .report import StepRef

if TYPE_CHECKING:
    from .._log.codec import JSONValue


class SagaObserver(Protocol):
    """What the fan-out calls on each observer (``saga`` is the reporting saga)."""

    def saga_begin(self, saga: Any) -> None: ...

    def saga_end(self, saga: Any, error: BaseException | None) -> None: ...

    def step_begin(self, saga: Any, step: StepRef, semantics: Semantics) -> None: ...

    def step_end(self, saga: Any, step: StepRef, error: BaseException | None) -> None: ...

    def gate_refused(self, saga: Any, step: StepRef, rule: str, reason: str) -> None: ...

    def compensation_begin(self, saga: Any, step: StepRef) -> None: ...

    def compensation_end(self, saga: Any, step: StepRef, error: BaseException | None) -> None: ...

    def approval_requested(self, saga: Any, step: StepRef, reason: str) -> None: ...

    def approval_decided(
        self, saga: Any, step: StepRef, outcome: str, approvers: tuple[str, ...]
    ) -> None: ...

    def trace_ids(self) -> Mapping[str, str] | None: ...


class Observers:
    """A kit's observers, and the fan-out the engine calls.

    Each event goes to every observer in order; an observer's exception is swallowed, counted
    in :attr:`errors` and kept (as text) in :attr:`last_error`.
    """

    def __init__(self, observers: Iterable[SagaObserver] = ()) -> None:
        self._observers: tuple[SagaObserver, ...] = tuple(observers)
        self._lock = threading.Lock()
        self.errors = 0
        """How many observer calls raised (and were swallowed)."""
        self.last_error: str | None = None

    def add(self, observer: SagaObserver) -> None:
        """Register ``observer`` for the sagas that start from now on."""
        with self._lock:
            self._observers = (*self._observers, observer)

    def remove(self, observer: SagaObserver) -> None:
        """Unregister ``observer`` (sagas already running keep telling it)."""
        with self._lock:
            self._observers = tuple(o for o in self._observers if o is not observer)

    def __iter__(self) -> Iterator[SagaObserver]:
        return iter(self._observers)

    def __len__(self) -> int:
        return len(self._observers)

    def active(self) -> Dispatch | None:
        """What a starting saga calls: ``None`` when nothing is registered (the free path)."""
        observers = self._observers
        return Dispatch(self, observers) if observers else None

    def _failed(self, observer: SagaObserver, event: str, exc: Exception) -> None:
        with self._lock:
            self.errors += 1
            self.last_error = f"{type(observer).__name__}.{event}: {type(exc).__name__}: {exc}"


class Dispatch:
    """The observers of one saga, fixed when it starts; never raises into the engine."""

    __slots__ = ("_observers", "_owner")

    def __init__(self, owner: Observers, observers: tuple[SagaObserver, ...]) -> None:
        self._owner = owner
        self._observers = observers

    def saga_begin(self, saga: Any) -> None:
        for o in self._observers:
            try:
                o.saga_begin(saga)
            except Exception as exc:
                self._owner._failed(o, "saga_begin", exc)

    def saga_end(self, saga: Any, error: BaseException | None) -> None:
        for o in self._observers:
            try:
                o.saga_end(saga, error)
            except Exception as exc:
                self._owner._failed(o, "saga_end", exc)

    def step_begin(self, saga: Any, step: StepRef, semantics: Semantics) -> None:
        for o in self._observers:
            try:
                o.step_begin(saga, step, semantics)
            except Exception as exc:
                self._owner._failed(o, "step_begin", exc)

    def step_end(self, saga: Any, step: StepRef, error: BaseException | None) -> None:
        for o in self._observers:
            try:
                o.step_end(saga, step, error)
            except Exception as exc:
                self._owner._failed(o, "step_end", exc)

    def gate_refused(self, saga: Any, step: StepRef, rule: str, reason: str) -> None:
        for o in self._observers:
            try:
                o.gate_refused(saga, step, rule, reason)
            except Exception as exc:
                self._owner._failed(o, "gate_refused", exc)

    def compensation_begin(self, saga: Any, step: StepRef) -> None:
        for o in self._observers:
            try:
                o.compensation_begin(saga, step)
            except Exception as exc:
                self._owner._failed(o, "compensation_begin", exc)

    def compensation_end(self, saga: Any, step: StepRef, error: BaseException | None) -> None:
        for o in self._observers:
            try:
                o.compensation_end(saga, step, error)
            except Exception as exc:
                self._owner._failed(o, "compensation_end", exc)

    def approval_requested(self, saga: Any, step: StepRef, reason: str) -> None:
        for o in self._observers:
            try:
                o.approval_requested(saga, step, reason)
            except Exception as exc:
                self._owner._failed(o, "approval_requested", exc)

    def approval_decided(
        self, saga: Any, step: StepRef, outcome: str, approvers: tuple[str, ...]
    ) -> None:
        for o in self._observers:
            try:
                o.approval_decided(saga, step, outcome, approvers)
            except Exception as exc:
                self._owner._failed(o, "approval_decided", exc)

    def stamp(self, data: dict[str, JSONValue]) -> None:
        """Add the current trace context to a record's ``data`` (first observer that has one)."""
        for o in self._observers:
            try:
                ids = o.trace_ids()
            except Exception as exc:
                self._owner._failed(o, "trace_ids", exc)
                continue
            if ids:
                data["trace"] = dict(ids)  # a copy: records never share a mutable value
                return


__all__ = ["Dispatch", "Observers", "SagaObserver"]
