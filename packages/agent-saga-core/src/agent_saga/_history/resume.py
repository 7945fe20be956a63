"""Resuming a suspended saga: its steps read back from the log, continued by a new owner.

``kit.transaction(resume=saga_id)`` calls :func:`resume_saga` under the same lease recovery
takes on the saga, so a resume and a recovery of an expired suspension never both proceed. The
saga is rebuilt from its records exactly as the history views see it:

* committed steps not yet compensated become the saga's steps again, with their logged
  arguments, result and idempotency key; a rollback in this process compensates them (newest
  first, after this process's own) with the compensator registered under the logged name. A
  compensator that is not registered here fails that compensation (the saga needs a human); a
  step whose arguments or result were not stored exactly cannot be compensated automatically
  either;
* steps whose tool raised (COMPENSABLE or IRREVERSIBLE) are probed on rollback, as in the first
  process;
* a call whose intent has no outcome (paused by its framework when the saga was suspended) is
  continued by the next call of the same tool with the same arguments, as the same step;
* the next ordinal and the savepoint count continue where the first process stopped.

A durable ``saga.resumed`` record names the new owner before the block runs.
"""

from __future__ import annotations

import inspect
import os
from typing import Any

from .._engine.compensation import CompensationRef
from .._engine.pending import call_key
from .._engine.report import StepRef
from .._engine.runtime import Runtime
from .._engine.saga import Saga
from .._engine.spec import ToolSpec
from .._engine.steps import PreparedCall, Step
from .._errors import ResumeError
from .._log.codec import is_restorable
from .._log.records import Kind, Record, SagaStatus, Semantics
from .build import CompensationState, SagaView, StepOutcome, StepView, sagas
from .recovery import LEASE_TTL
from .sagareads import own_records

_SETTLED = (CompensationState.COMPENSATED, CompensationState.FAILED, CompensationState.STARTED)


def resume_saga(runtime: Runtime, saga_id: str) -> Saga:
    """The suspended saga ``saga_id``, rebuilt and owned by this process (see module docstring).

    Durable on return: the ``saga.resumed`` record.

    Raises:
        ResumeError: no such saga, it has ended, it is running (or crashed) elsewhere, its
            suspension expired, or another process is resuming or recovering it now.
    """
    store = runtime.store
    lease = store.lease(f"recover-{saga_id}", ttl=LEASE_TTL)
    if lease is None:
        raise ResumeError(f"saga {saga_id} is being resumed or recovered by another process")
    try:
        own = own_records(store, saga_id)
        if not own:
            raise ResumeError(f"no saga {saga_id!r} in the log")
        view = sagas(own)[0]
        _check_resumable(view, runtime.clock.now())
        saga = Saga(runtime, saga_id, view.name)
        _rebuild(saga, view, own)
        if saga.events is not None:
            saga.events.saga_begin(saga)
        saga.log(
            Kind.SAGA_RESUMED,
            {"owner": store.owner_id, "pid": os.getpid(), "host": os.uname().nodename},
            durable=True,
        )
    finally:
        lease.release()
    return saga


def _check_resumable(view: SagaView, now: float) -> None:
    if view.status is SagaStatus.RUNNING:
        raise ResumeError(
            f"saga {view.id} is not suspended: it is running elsewhere (owner {view.owner}), or "
            "its process died and `agent-saga recover` rolls it back"
        )
    if view.status is not SagaStatus.SUSPENDED:
        raise ResumeError(f"saga {view.id} has ended ({view.status.value}); it cannot resume")
    if view.expires_at is not None and now * 1000 >= view.expires_at:
        raise ResumeError(f"saga {view.id}'s suspension expired; recovery rolls it back")


def _rebuild(saga: Saga, view: SagaView, records: list[Record]) -> None:
    """Give ``saga`` the state its first process left (see the module docstring)."""
    ordinals = [s.ordinal for s in view.steps]
    for record in records:
        after = record.data.get("next_ordinal")
        if record.kind == Kind.SAGA_SUSPENDED and isinstance(after, int):
            ordinals.append(after - 1)
    saga._ordinal = max(ordinals, default=0)
    saga._savepoints = sum(1 for r in records if r.kind == Kind.SAVEPOINT_BEGIN)
    saga.written = len(records)
    for view_step in view.steps:
        if view_step.compensation_recoverable is False:
            raise ResumeError(
                f"saga {view.id} step #{view_step.ordinal} {view_step.tool} is compensated by "
                "an in-process callable of its first process; it cannot be resumed"
            )
        step = _step(view_step)
        if step is None:
            continue
        if view_step.outcome is StepOutcome.DONE:
            saga.steps.append(step)
        elif view_step.outcome is StepOutcome.FAILED:
            step.raised = True
            saga.raised.append(step)
        elif isinstance(view_step.args, dict):  # paused: continued by its re-run
            prepared = PreparedCall(step, dict(step.args), (), None, None)
            saga.park(call_key(view_step.tool, view_step.args), prepared, paused=True)


def _step(view: StepView) -> Step | None:
    """The engine's step for a logged one that may still need undoing (``None``: nothing to)."""
    if view.outcome is StepOutcome.REFUSED or view.semantics is None:
        return None
    if view.compensation_state in _SETTLED or view.probe is not None:
        return None  # compensated, probed or handed to a human in the first process
    semantics = Semantics(view.semantics)
    if view.outcome is StepOutcome.FAILED and not semantics.durable_intent:
        return None
    ref: CompensationRef | None = None
    if view.compensation is not None:
        exact = is_restorable(view.args) and is_restorable(view.result)
        ref = CompensationRef(view.compensation, None) if exact else _unrestorable(view)
    spec = ToolSpec(view.tool, _not_here, semantics, ref, inspect.Signature(), False)
    key = view.idempotency_key or ""
    args = dict(view.args) if isinstance(view.args, dict) else {}
    step = Step(StepRef(view.ordinal, view.tool, key), spec, args)
    step.result = view.result
    return step


def _unrestorable(view: StepView) -> CompensationRef:
    def refuse(**_: Any) -> None:
        raise LookupError(
            f"step #{view.ordinal} {view.tool}: its arguments or result were not stored "
            "exactly, so it cannot be compensated automatically"
        )

    return CompensationRef(None, refuse)


def _not_here(**_: Any) -> Any:  # pragma: no cover - a resumed step's tool never runs here
    raise AssertionError("a resumed step's tool runs through its framework or its @tool")
