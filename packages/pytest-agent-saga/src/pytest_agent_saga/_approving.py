"""The runner's approver: steps that need a human approval get one, unless it is to expire.

A transaction with IRREVERSIBLE steps (or steps a rule sends for approval) cannot commit
without a vote. In the runner's kits an approval channel casts that vote at once, through the
same :func:`agent_saga.submit_vote` the CLI and the Slack app use, so the engine's real wait,
count and decision run. For the "approval that expires" fault point the channel withholds the
vote of one step, and the request expires after :data:`EXPIRES_AFTER` seconds.

Only the runner's own approver is allowed: approvers from the project's configuration are not
used (a run never waits for a person), and a rule that names its own approvers cannot be
satisfied here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_saga import Approvals, submit_vote

if TYPE_CHECKING:
    from agent_saga import ApprovalRequest, LogStore

APPROVER = "chaos:approver"
EXPIRES_AFTER = 0.2
"""Seconds until a withheld approval expires (real time: the engine waits for it)."""
POLL = 0.005


class VotingChannel:
    """Approves every request as soon as it is posted, except those for step ``withhold``."""

    def __init__(self, store: LogStore, withhold: int | None) -> None:
        self.store = store
        self.withhold = withhold

    def request_posted(self, request: ApprovalRequest) -> None:
        if request.ordinal != self.withhold:
            submit_vote(self.store, request.id, APPROVER, "approve", channel="chaos")

    def request_decided(self, request: ApprovalRequest, decision: str) -> None:
        return None


def runner_approvals(store: LogStore, withhold: int | None = None) -> Approvals:
    """Approvals for one of the runner's kits on ``store``."""
    return Approvals(
        approvers=[APPROVER],
        expires_after=EXPIRES_AFTER,
        channels=[VotingChannel(store, withhold)],
        poll=POLL,
    )
