"""What a running saga is and has done: the part that rollback and approvals build on.

:class:`SagaState` holds a saga's identity, status, buffered and written records, the steps that
took effect, their budget reservations and the failed compensations; its :meth:`SagaState.log`
is the one way a saga's records reach the store. The step machinery (``saga.py``), rollback
(``rollback.py``) and the approval wait (in ``_approvals``) all work on it, so none of them needs
the others.
"""

from __future__ import annotations

import threading

from .._log.codec import CodecError, JSONValue
from .._log.fit import problem, shrink_to_fit
from .._log.records import IN_SAGA, Entry, Kind, SagaStatus
from .ahead import AheadCalls
from .events import Dispatch
from .report import CompensationFailure
from .runtime import Runtime
from .steps import PreparedCall, Step, StepHolds

_tuple = tuple.__new__
"""Builds the records' :class:`Entry` without its Python-level ``__new__`` (several per step)."""


class SagaState:
    """One transaction's state and its log. Created by a transaction, never built directly.

    Invariants: records of one saga reach the store in the order they were logged; the steps in
    :meth:`committed_steps` are exactly those whose effect took place, in order.
    """

    def __init__(self, runtime: Runtime, saga_id: str, name: str) -> None:
        self.runtime = runtime
        self.id = saga_id
        self.name = name
        self.status = SagaStatus.RUNNING
        self.lock = threading.Lock()
        self.pending: list[Entry] = []
        """Records buffered on the fast path, written (in order) with the next flushed one."""
        self.written = 0
        self.steps: list[Step] = []
        self.raised: list[Step] = []
        """COMPENSABLE and IRREVERSIBLE steps whose body raised: their effect may have landed."""
        self.savepoints: dict[int, tuple[int, int]] = {}
        """Savepoint scope id -> (its number in the saga, the first ordinal after it began)."""
        self.interrupted: BaseException | None = None
        """Set when a compensation was interrupted (Ctrl-C, exit, cancellation): the rollback
        stops there and the saga is left without an end record, for recovery to finish."""
        self.parked: dict[str, list[tuple[PreparedCall, bool]]] = {}
        """Calls that will run again as the same step, by tool and arguments: suspended by a
        framework's pause (``True``: no outcome logged yet) or failed and retryable."""
        self.holds = StepHolds(self.log)
        self.failed_compensations: list[CompensationFailure] = []
        """Every compensation of this saga that failed, savepoints' included: a terminal
        rollback after one of them ends ``needs_human`` even if its own compensations succeed."""
        self.now = runtime.clock.now
        self.fast_path = runtime.fast_path
        self.events: Dispatch | None = runtime.observers.active()
        """The saga's observers, fixed when it starts; ``None`` (no cost) when there are none."""
        self.ahead: AheadCalls | None = None
        """Steps run ahead of confirmation (see ``ahead.py``); ``None`` when there are none."""

    def log(
        self, kind: Kind, data: dict[str, JSONValue], *, durable: bool, flush: bool = False
    ) -> None:
        """Append a record of this saga.

        With ``durable``, return only once it is on stable storage (fsync). With ``flush``, it
        is written to the store now (it survives the process, not necessarily a power loss).
        Otherwise it may be buffered (fast path) and written, in order, with the next record
        that is flushed or durable.
        """
        if self.events is not None:
            self.events.stamp(data)
        ts = int(self.now() * 1000)
        with self.lock:
            before = self.written + len(self.pending)
            if kind is Kind.SAGA_END:
                # The terminal record commits to how many records of this saga precede it, so
                # a disclosure that leaves one out cannot verify (see proofs/_disclosure.py).
                data["records"] = before
            # Every record states its place in the saga, so an index hiding one is caught.
            entry = _tuple(Entry, (kind, self.id, {**data, IN_SAGA: before}, ts))
            self.pending.append(entry)
            if not (durable or flush) and self.fast_path:
                return
            batch, self.pending = self.pending, []
            # Under the saga's lock, so its records keep their order; other sagas still share
            # the store's group commit.
            try:
                self.runtime.store.append(batch, sync=durable)
            except CodecError:
                self._append_fitted(batch, durable)
                return
            self.written += len(batch)

    def _append_fitted(self, batch: list[Entry], durable: bool) -> None:
        """Write a batch one of whose entries cannot be sealed (nothing of it was written).

        Entries buffered earlier were accepted already: a value too large for the log is
        replaced by a placeholder and they are written. The entry being logged now is the
        caller's to lose: when it cannot be sealed, the rest is written and it is refused.
        """
        *earlier, current = batch
        refused = problem(current)
        kept = [shrink_to_fit(entry) for entry in earlier]
        if refused is None:
            kept.append(current)
        self.runtime.store.append(kept, sync=durable)
        self.written += len(kept)
        if refused is not None:
            raise CodecError(f"{current.kind} of saga {self.id} cannot be logged: {refused}")

    def end_ahead(self, *, committed: bool, ending: bool = True) -> None:
        """When the saga ends (``ending``; a savepoint's rollback is not its end): discard the
        steps run ahead and never claimed (see ``ahead.py``)."""
        if ending and self.ahead is not None:
            self.ahead.discard(committed=committed)

    def committed_steps(self) -> list[Step]:
        """The steps whose effect took place, in order (rollback reads them)."""
        with self.lock:
            return list(self.steps)
