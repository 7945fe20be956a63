"""Approvals asked of the client's user through MCP elicitation.

The core decides approvals: on ``RequireApproval`` (an IRREVERSIBLE call, a
``require_approval`` rule) it logs a request bound to the call's digest, tells its channels, and
waits for votes in the log. :class:`ElicitationChannel` is one such channel. When the call that
needs the approval came from a client that supports elicitation, it sends that client an
``elicitation/create`` request (on the tool call's own stream) showing the tool, the arguments
and the digest, and turns the answer into a vote with :func:`agent_saga.submit_vote`, as the
approver ``elicitation_approver`` (``mcp:client`` by default). The core checks that vote like
any other (allowed approver, not expired, this request's digest) before it counts.

It never decides on its own. One exception is stated plainly: when the client cannot be asked
(no elicitation support, or the question could not be delivered) and no other approver may
decide the request, the elicitation approver's vote is a *deny* with the reason as its note, so
the call is refused at once rather than after the request expires. Otherwise the request waits
for the other approvers (``agent-saga approve <id>``, Slack, ...).

The channel finds the call through a context variable the gateway sets around each step; the
core gates in a worker thread when approvals are configured, and that thread inherits it.
"""

from __future__ import annotations

import asyncio
import json
from contextvars import ContextVar
from typing import Any, NamedTuple, Protocol

from agent_saga import ApprovalRequest, LogStore, submit_vote
from mcp import types
from mcp.server.context import ServerRequestContext

CHANNEL = "mcp-elicitation"
STDIO = "stdio"
"""The session key of the stdio client (the gateway process serves one)."""


class Caller(Protocol):
    """Who sent the tool call being served: its client session, and a way to ask its user."""

    @property
    def session_key(self) -> str | None:
        """The client session's key (``None``: the request has no session)."""
        ...

    def can_elicit(self) -> bool:
        """Whether the client can be sent a form elicitation now."""
        ...

    async def elicit(self, message: str, schema: dict[str, Any]) -> types.ElicitResult:
        """Ask the client's user; their answer."""
        ...


class SdkCaller:
    """A call served by the SDK's server (streamable HTTP; stdio at the 2026 protocol era)."""

    def __init__(self, request: ServerRequestContext[Any, Any]) -> None:
        self.request = request

    @property
    def session_key(self) -> str | None:
        if self.request.request is None:
            return STDIO
        headers = getattr(self.request.request, "headers", None)
        return (headers or {}).get("mcp-session-id")

    def can_elicit(self) -> bool:
        session = self.request.session
        capabilities = session.client_capabilities
        elicitation = capabilities.elicitation if capabilities is not None else None
        if elicitation is None or not session.can_send_request:
            return False
        return elicitation.form is not None or elicitation.url is None

    async def elicit(self, message: str, schema: dict[str, Any]) -> types.ElicitResult:
        return await self.request.session.elicit_form(
            message, schema, related_request_id=self.request.request_id
        )


class CallContext(NamedTuple):
    """The call being served, and the event loop it is served on."""

    caller: Caller
    loop: asyncio.AbstractEventLoop


CURRENT_CALL: ContextVar[CallContext | None] = ContextVar("agent_saga_mcp_call", default=None)

APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approve": {
            "type": "boolean",
            "title": "Approve",
            "description": "Run this call exactly as shown",
        }
    },
    "required": ["approve"],
}


def question(request: ApprovalRequest) -> str:
    """What the user is asked: the call in full and what approving it means."""
    args = json.dumps(request.args, sort_keys=True, ensure_ascii=False)
    if len(args) > 1500:
        args = args[:1497] + "..."
    return (
        f"Approve {request.tool} ({request.semantics})?\n"
        f"Arguments: {args}\n"
        f"Why: {request.reason}\n"
        f"Request {request.id}, action digest {request.digest[:16]}. "
        "Approving runs exactly this call, once."
    )


class ElicitationChannel:
    """An :class:`agent_saga.ApprovalChannel` that asks the client's user (see the module)."""

    def __init__(self, store: LogStore | None, approver: str) -> None:
        self.store = store
        """The log votes go to: the kit's store (set once the kit is open)."""
        self.approver = approver

    def request_posted(self, request: ApprovalRequest) -> None:
        call = CURRENT_CALL.get()
        if call is None or self.approver not in request.approvers:
            return
        asyncio.run_coroutine_threadsafe(self._ask(call, request), call.loop)

    def request_decided(self, request: ApprovalRequest, decision: str) -> None:
        return None

    async def _ask(self, call: CallContext, request: ApprovalRequest) -> None:
        if not call.caller.can_elicit():
            await self._fallback(request, "the client does not support elicitation")
            return
        try:
            answer = await call.caller.elicit(question(request), APPROVAL_SCHEMA)
        except Exception as exc:
            await self._fallback(request, f"the elicitation failed ({type(exc).__name__}: {exc})")
            return
        content = answer.content or {}
        approved = answer.action == "accept" and content.get("approve") is True
        decision = "approve" if approved else "deny"
        await self._vote(request, decision, f"elicitation answered {answer.action}")

    async def _fallback(self, request: ApprovalRequest, why: str) -> None:
        """Deny at once only when nobody else may decide (see the module docstring)."""
        if any(approver != self.approver for approver in request.approvers):
            return
        await self._vote(request, "deny", f"{why}, and no other approver may decide")

    async def _vote(self, request: ApprovalRequest, decision: str, note: str) -> None:
        if self.store is None:
            return
        await asyncio.to_thread(
            submit_vote, self.store, request.id, self.approver, decision, channel=CHANNEL, note=note
        )


__all__ = [
    "APPROVAL_SCHEMA",
    "CURRENT_CALL",
    "STDIO",
    "CallContext",
    "Caller",
    "ElicitationChannel",
    "SdkCaller",
]
