"""Block Kit for one approval request: what a human must see to decide, and the two buttons.

The message shows the action exactly as the agent's log holds it: tool, semantics, arguments
(fields declared ``redact=`` are already masked in the request), saga, step, the rule that asked
for a human, who may decide, the expiry and the action digest the decision is bound to. Text
from the request is escaped for Slack's mrkdwn, so an argument cannot forge a mention or a link.
"""

from __future__ import annotations

import json
import time
from typing import Any

from agent_saga import ApprovalRequest

APPROVE_ACTION = "agent_saga_approve"
DENY_ACTION = "agent_saga_deny"
ACTIONS_BLOCK = "agent_saga_decision"
_ARGS_LIMIT = 2500  # a section's text is at most 3,000 characters
_FIELD_LIMIT = 1900  # a field's text is at most 2,000

OUTCOMES = {
    "approved": ":white_check_mark: Approved: the step may run.",
    "denied": ":no_entry: Denied: the step was refused and its saga rolls back.",
    "expired": ":hourglass: Expired: nobody decided in time, so it was denied.",
    "arguments_changed": (
        ":warning: Refused: the arguments changed after the request was made, so the approval "
        "does not cover them."
    ),
}


def escape(text: str) -> str:
    """Escape the three characters Slack's mrkdwn treats as control (``&``, ``<``, ``>``)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"... ({len(text) - limit} more characters)"


def _when(at: float) -> str:
    fallback = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))
    return f"<!date^{int(at)}^{{date_short_pretty}} {{time_secs}}|{fallback}>"


def summary(request: ApprovalRequest) -> str:
    """One line naming the request: the notification text and the start of every reply."""
    return (
        f"{request.id}: {request.tool} ({request.semantics}) in saga {request.saga}, "
        f"step {request.ordinal}, digest {request.digest[:16]}"
    )


def _fields(request: ApprovalRequest) -> list[dict[str, Any]]:
    approvers = escape(", ".join(request.approvers))
    pairs = [
        ("Tool", f"`{escape(request.tool)}` ({escape(request.semantics)})"),
        ("Saga / step", f"`{escape(request.saga)}` / {request.ordinal}"),
        ("Asked by", escape(f"{request.rule}: {request.reason}")),
        ("May decide", f"{approvers} (quorum {request.quorum})"),
        ("Requested", _when(request.requested_at)),
        ("Expires", _when(request.expires_at)),
    ]
    return [
        {"type": "mrkdwn", "text": f"*{name}*\n{_clip(value, _FIELD_LIMIT)}"}
        for name, value in pairs
    ]


def _head(request: ApprovalRequest, title: str) -> list[dict[str, Any]]:
    args = json.dumps(request.args, ensure_ascii=False, sort_keys=True, indent=1)
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": escape(title)}},
        {"type": "section", "fields": _fields(request)},
        {
            "type": "section",
            "text": {
                "type": "mrkdwn",
                "text": f"*Arguments*\n```{escape(_clip(args, _ARGS_LIMIT))}```",
            },
        },
        {
            "type": "context",
            "elements": [
                {"type": "mrkdwn", "text": f"request `{request.id}`  digest `{request.digest}`"}
            ],
        },
    ]


def _button(action: str, label: str, style: str, request: ApprovalRequest) -> dict[str, Any]:
    return {
        "type": "button",
        "action_id": action,
        "text": {"type": "plain_text", "text": label},
        "style": style,
        "value": request.id,
    }


def request_blocks(request: ApprovalRequest) -> list[dict[str, Any]]:
    """The pending request with Approve and Deny buttons (each carries the request id)."""
    approve = _button(APPROVE_ACTION, "Approve", "primary", request)
    approve["confirm"] = {
        "title": {"type": "plain_text", "text": "Approve this action?"},
        "text": {"type": "plain_text", "text": _clip(summary(request), 280)},
        "confirm": {"type": "plain_text", "text": "Approve"},
        "deny": {"type": "plain_text", "text": "Cancel"},
    }
    return [
        *_head(request, f"Approval needed: {request.tool} ({request.semantics})"),
        {
            "type": "actions",
            "block_id": ACTIONS_BLOCK,
            "elements": [approve, _button(DENY_ACTION, "Deny", "danger", request)],
        },
    ]


def outcome_text(decision: str) -> str:
    """What a decision means, in one sentence (unknown decisions are shown as they are)."""
    return OUTCOMES.get(decision, f"Decided: {decision}.")


def decided_blocks(request: ApprovalRequest, decision: str) -> list[dict[str, Any]]:
    """The same request once decided: the outcome instead of the buttons."""
    return [
        *_head(request, f"{request.tool} ({request.semantics}): {decision}"),
        {"type": "section", "text": {"type": "mrkdwn", "text": escape(outcome_text(decision))}},
    ]
