"""Asking the runtime's approver about one step (approvals live in a layer above the engine).

The saga hands its :class:`~agent_saga._engine.runtime.StepApprover` an
:class:`~agent_saga._engine.runtime.ApprovalStep`: the values that will run, the values as
logged, a way to write the saga's records durably and to tell its observers.
"""

from __future__ import annotations

from .._gate.decisions import RequireApproval
from .._log.codec import JSONValue
from .._log.records import Kind
from .runtime import ApprovalStep
from .state import SagaState
from .steps import Step


def ask_approval(
    saga: SagaState, step: Step, decision: RequireApproval, shown_args: JSONValue
) -> tuple[str, str] | None:
    """Block until ``step`` is approved (``None``) or not (``(rule, reason)`` to refuse with)."""
    approver = saga.runtime.approvals
    if approver is None:
        return decision.rule, f"{decision.reason}; no approval channel is configured"
    ref, events = step.ref, saga.events

    def log(kind: Kind, data: dict[str, JSONValue], durable: bool) -> None:
        saga.log(kind, data, durable=durable)

    def requested(reason: str) -> None:
        if events is not None:
            events.approval_requested(saga, ref, reason)

    def decided(outcome: str, approvers: tuple[str, ...]) -> None:
        if events is not None:
            events.approval_decided(saga, ref, outcome, approvers)

    runtime = saga.runtime
    request = ApprovalStep(
        saga.id, ref, step.spec, step.args, shown_args, decision,
        runtime.clock, runtime.store, log, requested, decided,
    )  # fmt: skip
    return approver.approve_step(request)
