"""Observers: what happens in a saga, told to tracing and monitoring code as it happens.

An observer sees a saga begin and end, each step begin and end (done, failed or refused), each
gate refusal, each compensation begin and end, and approvals requested and decided. It cannot
change what happens: every call to an observer is wrapped, and an exception it raises is
swallowed and counted (:attr:`Observers.errors`), never propagated into the transaction.

Cost: a kit with no observer pays one ``is None`` check per event site; the engine reads the
observers of a saga once, when the saga starts (:meth:`Observers.active`), so an observer
added while a saga runs sees the sagas started after it.

Order of events, and what is current when a record is written:

* ``saga_begin`` comes before the saga's first record, ``saga_end`` after its terminal one is
  durable (or after writing it failed);
* ``step_begin`` comes before the gate decides and before the step's intent is logged,
  ``step_end`` after its outcome is logged (a refused step ends with the refusal);
* ``compensation_begin`` before a compensation's intent record, ``compensation_end`` after its
  outcome record.

While observers are registered, each record the engine writes for a saga carries the trace
context an observer reports as current (:meth:`Observer.trace_ids`) in a ``trace`` field of its
data, so the log can be joined to the traces. With no observer no such field is written.
"""

from __future__ import annotations

from collections.abc import Mapping

from .._log.records import Semantics
from .report import StepRef
from .saga import Saga


class Observer:
    """Base class of observers: every event is a no-op; override those you need.

    Events arrive on the thread (and in the context) of the code running the saga. An
    observer must not block for long: it runs inline with the transaction. Whatever it
    raises is swallowed and counted by the kit, never seen by the transaction.
    """

    def saga_begin(self, saga: Saga) -> None:
        """A saga started (before its first record is written)."""

    def saga_end(self, saga: Saga, error: BaseException | None) -> None:
        """A saga ended; ``saga.status`` tells how. ``error``: the cause of a rollback, or the
        error that stopped its terminal record from being written."""

    def step_begin(self, saga: Saga, step: StepRef, semantics: Semantics) -> None:
        """A call became step ``step`` (before the gate decides and the intent is logged)."""

    def step_end(self, saga: Saga, step: StepRef, error: BaseException | None) -> None:
        """The step's outcome is logged: ``error`` is ``None`` when it took effect, else why it
        did not (a :class:`~agent_saga.GateRefused` for a refusal) or what the tool raised."""

    def gate_refused(self, saga: Saga, step: StepRef, rule: str, reason: str) -> None:
        """The gate (or the kill switch, or an argument check) refused the step; its body does
        not run. Allowed calls are visible as steps that go on."""

    def compensation_begin(self, saga: Saga, step: StepRef) -> None:
        """Step ``step`` is about to be compensated (before its compensation intent record)."""

    def compensation_end(self, saga: Saga, step: StepRef, error: BaseException | None) -> None:
        """A compensation finished; ``error`` when it failed (the saga will need a human)."""

    def approval_requested(self, saga: Saga, step: StepRef, reason: str) -> None:
        """Step ``step`` waits for humans (after the durable request record, before waiting)."""

    def approval_decided(
        self, saga: Saga, step: StepRef, outcome: str, approvers: tuple[str, ...]
    ) -> None:
        """The wait ended (after the durable decision record): ``outcome`` is ``approved``,
        ``denied``, ``expired`` or ``arguments_changed``; ``approvers``: who approved."""

    def trace_ids(self) -> Mapping[str, str] | None:
        """The trace context current now (e.g. ``{"trace_id": ..., "span_id": ...}``), which
        the engine stores in the records it writes; ``None`` when there is none."""
        return None


__all__ = ["Observer"]
