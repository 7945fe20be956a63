"""An approval given through the OpenAI Agents SDK's own interruption, counted as an agent-saga
vote when the application says who gave it.

The SDK's ``state.approve(item)`` carries no identity, so on its own it is the application's
check, not a vote. :func:`approve` does the SDK's approval and remembers who approved which
call; when the run resumes and the gate asks agent-saga's approvers about that call, the
:class:`SdkApprovals` channel (one of the kit's ``Approvals(channels=...)``) submits that
person's vote with ``submit_vote`` on the request, once it has checked that the request's
action digest is the digest of the call the person approved (same tool, same arguments). The
vote is then checked like any other (an approver the kit does not allow is refused), so one
human action approves the call in both places.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from contextvars import ContextVar
from typing import Any

from agent_saga import ApprovalRequest, action_digest, current_saga, submit_vote
from agents import RunState, ToolApprovalItem

CHANNEL = "openai-agents"
_KEPT = 1024
"""Approvals remembered at most (oldest dropped): each is used once, when its call runs."""

CALL_ID: ContextVar[str | None] = ContextVar("agent_saga_openai_call", default=None)
"""The tool call the gate is deciding on (set by the adapter's guardrail)."""


class _Approved:
    """Who approved which SDK tool call, until the call's approval request is posted."""

    def __init__(self) -> None:
        self._calls: OrderedDict[str, tuple[str, str, str]] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, call_id: str, approver: str, tool: str, arguments: str) -> None:
        with self._lock:
            self._calls[call_id] = (approver, tool, arguments)
            while len(self._calls) > _KEPT:
                self._calls.popitem(last=False)

    def take(self, call_id: str) -> tuple[str, str, str] | None:
        with self._lock:
            return self._calls.pop(call_id, None)


APPROVED = _Approved()


def approve(
    state: RunState[Any, Any],
    item: ToolApprovalItem,
    *,
    approver: str,
    always_approve: bool = False,
) -> None:
    """``state.approve(item)``, recorded as ``approver``'s agent-saga vote for that call.

    ``approver`` is the identity the application vouches for (as the kit's ``Approvals`` names
    approvers, e.g. ``"unix:alice"``). The vote is submitted when the resumed run's gate asks
    for approval of exactly this call, through :class:`SdkApprovals`.
    """
    state.approve(item, always_approve=always_approve)
    raw = item.raw_item
    call_id = getattr(raw, "call_id", None)
    arguments = getattr(raw, "arguments", None)
    if isinstance(call_id, str) and isinstance(arguments, str):
        APPROVED.put(call_id, approver, item.tool_name or item.name or "", arguments)


class SdkApprovals:
    """An approval channel that turns approvals given with :func:`approve` into votes.

    Add it to the kit's approvals: ``Approvals(approvers=[...], channels=[SdkApprovals()])``.
    It posts nothing anywhere; requests it cannot match wait for other votes as usual.
    """

    def request_posted(self, request: ApprovalRequest) -> None:
        call_id = CALL_ID.get()
        saga = current_saga()
        approved = APPROVED.take(call_id) if call_id is not None else None
        if approved is None or saga is None or saga.id != request.saga:
            return
        approver, tool, arguments = approved
        try:
            args = json.loads(arguments or "{}")
        except ValueError:
            return
        if tool != request.tool or action_digest(tool, request.semantics, args) != request.digest:
            return  # the human approved another call than the one the gate asks about
        submit_vote(
            saga.runtime.store,
            request.id,
            approver,
            "approve",
            channel=CHANNEL,
            note=f"approved through the OpenAI Agents SDK (tool call {call_id})",
        )

    def request_decided(self, request: ApprovalRequest, decision: str) -> None:
        pass
