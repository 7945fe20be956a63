"""Suspending a saga: leaving it open, durably and ownerless, for a later request to resume.

A suspended saga is one whose transaction ended its block with :meth:`Saga.suspend`: instead of
``saga.end`` it gets a durable ``saga.suspended`` record (owner, next ordinal, expiry) and takes
no more steps in this process. Only steps that another process can undo may be carried over:
a compensation given as an in-process callable cannot be found after a restart, so a saga
holding one is refused at :meth:`Saga.suspend` (and again when its block ends). Resuming reads
the saga back from the log (``agent_saga._history.resume``).
"""

from __future__ import annotations

from .._errors import ConfigurationError
from .._log.codec import JSONValue
from .._log.records import Kind
from .state import SagaState


def check_suspendable(saga: SagaState, expires_after: float | None) -> float | None:
    """``expires_after`` once checked; raises :class:`ConfigurationError` when the saga could
    not be undone after a resume (a step compensated by an in-process callable)."""
    if expires_after is not None and not expires_after > 0:
        raise ConfigurationError(f"expires_after must be positive, got {expires_after!r}")
    with saga.lock:
        steps = [*saga.steps, *saga.raised]
        steps += [prepared.step for calls in saga.parked.values() for prepared, _ in calls]
    for step in steps:
        ref = step.spec.compensation
        if ref is not None and ref.name is None:
            raise ConfigurationError(
                f"saga {saga.id} cannot be suspended: step #{step.ref.ordinal} "
                f"{step.ref.tool} is compensated by an in-process callable that a later "
                "request cannot run; register its compensator by name (@compensator)"
            )
    return expires_after


def write_suspended(saga: SagaState, next_ordinal: int, expires_after: float | None) -> None:
    """Write the durable ``saga.suspended`` record; the saga's observers see it end here."""
    check_suspendable(saga, expires_after)
    saga.end_ahead(committed=True)  # a result run ahead lives in this process only: undone
    expires_at = None if expires_after is None else int((saga.now() + expires_after) * 1000)
    data: dict[str, JSONValue] = {
        "owner": saga.runtime.store.owner_id,
        "steps": len(saga.steps),
        "next_ordinal": next_ordinal,
        "expires_at": expires_at,
    }
    saga.log(Kind.SAGA_SUSPENDED, data, durable=True)
    if saga.events is not None:
        saga.events.saga_end(saga, None)
