"""The engine's side of an approval: request, wait, decide, for one step of one saga."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._gate.decisions import RequireApproval
from .._log.codec import JSONValue, to_jsonable
from .._log.records import Kind
from .channel import Waiter, new_request_id
from .request import ApprovalRequest, action_digest

if TYPE_CHECKING:
    from .._engine.saga import Saga, _Step


def await_approval(
    saga: Saga, step: _Step, decision: RequireApproval, shown_args: JSONValue
) -> tuple[str, str] | None:
    """Block until the step is approved (``None``) or not (``(rule, reason)`` to refuse with).

    The request and the decision are durable records of the saga. The digest is computed from
    the arguments about to run, again once the humans have decided, so arguments changed while
    waiting are refused.
    """
    approvals = saga.runtime.approvals
    if approvals is None:
        return decision.rule, f"{decision.reason}; no approval channel is configured"
    spec, ref, clock = step.spec, step.ref, saga.runtime.clock
    approvers = decision.approvers or approvals.approvers
    if not approvers:
        return decision.rule, f"{decision.reason}; no approver is configured"
    digest = action_digest(spec.name, spec.semantics_value, to_jsonable(step.args))
    now = clock.now()
    request = ApprovalRequest(
        id=new_request_id(),
        saga=saga.id,
        ordinal=ref.ordinal,
        tool=spec.name,
        semantics=spec.semantics_value,
        digest=digest,
        args=shown_args,
        rule=decision.rule,
        reason=decision.reason,
        approvers=tuple(approvers),
        quorum=max(1, decision.quorum),
        requested_at=now,
        expires_at=now + approvals.expires_after,
    )
    saga.log(Kind.APPROVAL_REQUESTED, request.to_data(), durable=True)
    if saga._obs is not None:
        saga._obs.approval_requested(saga, ref, decision.reason)
    for channel in approvals.channels:
        try:
            channel.request_posted(request)
        except Exception as exc:  # a failing channel must not decide anything
            saga.log(Kind.APPROVAL_REFUSED, _channel_error(request, channel, exc), durable=False)
    waiter = Waiter(approvals, saga.runtime.store, clock, request)
    outcome = waiter.wait(digest)
    if outcome == "approved":
        executed = action_digest(spec.name, spec.semantics_value, to_jsonable(step.args))
        if executed != digest:
            outcome = "arguments_changed"
    decided = waiter.decision_data(outcome)
    saga.log(Kind.APPROVAL_DECIDED, decided, durable=True)
    if saga._obs is not None:
        by = decided["by"]
        approvers = tuple(str(a) for a in by) if isinstance(by, list) else ()
        saga._obs.approval_decided(saga, ref, outcome, approvers)
    for channel in approvals.channels:
        try:
            channel.request_decided(request, outcome)
        except Exception:  # noqa: S112 - the decision is logged; the message may lag
            continue
    if outcome == "approved":
        return None
    return "approval", f"{decision.reason}: {outcome} (request {request.id})"


def _channel_error(
    request: ApprovalRequest, channel: object, exc: Exception
) -> dict[str, JSONValue]:
    return {
        "request": request.id,
        "by": type(channel).__name__,
        "reason": f"channel failed: {type(exc).__name__}: {exc}"[:500],
    }
