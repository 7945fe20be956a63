"""Waiting for and giving approvals: the engine's side and the approver's side.

The engine, on a ``RequireApproval`` decision, logs the request durably, tells the configured
channels, then watches the log for votes until the quorum approves, an allowed approver denies,
or the request expires; it logs the decision durably and runs the step only when approved.
Votes can come from any process sharing the log (the CLI, a Slack app): :func:`submit_vote`
appends them after the same checks the engine repeats when it counts them.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from .._errors import AgentSagaError, ConfigurationError
from .._log.codec import JSONValue
from .._log.follow import LogFollower
from .._log.records import Entry, Record
from .._log.store import LogStore
from .request import (
    DECIDED,
    REFUSED,
    REQUESTED,
    VOTE,
    ApprovalBook,
    ApprovalRequest,
    Vote,
    check_vote,
)

if TYPE_CHECKING:
    from .._clock import Clock

__all__ = ["ApprovalChannel", "Approvals", "VoteResult", "submit_vote"]


class ApprovalChannel(Protocol):
    """Where requests are shown to humans (a chat message, a ticket). Both calls must return
    quickly and never decide anything: decisions come back as votes in the log."""

    def request_posted(self, request: ApprovalRequest) -> None: ...

    def request_decided(self, request: ApprovalRequest, decision: str) -> None: ...


class Approvals:
    """How a kit gets human approvals for calls the gate marks ``RequireApproval``.

    Args:
        approvers: who may approve when the deciding rule names nobody (ids such as
            ``"unix:alice"``, ``"slack:U123"``, ``"key:alice"``). A request with no allowed
            approver is refused at once.
        expires_after: seconds until an undecided request counts as denied.
        channels: notified of each request and decision.
        require_signature: count only Ed25519-signed votes (``agent-saga approve --sign``).
        poll: seconds between looks at the log while waiting.
    """

    def __init__(
        self,
        *,
        approvers: Iterable[str] = (),
        expires_after: float = 600.0,
        channels: Sequence[ApprovalChannel] = (),
        require_signature: bool = False,
        poll: float = 0.05,
    ) -> None:
        if isinstance(approvers, str):
            raise ConfigurationError("approvers takes a list of ids, not one string")
        if expires_after <= 0 or poll <= 0:
            raise ConfigurationError("expires_after and poll must be positive")
        self.approvers = tuple(approvers)
        self.expires_after = expires_after
        self.channels = tuple(channels)
        self.require_signature = require_signature
        self.poll = poll

    def describe(self) -> dict[str, JSONValue]:
        approvers: list[JSONValue] = list(self.approvers)
        channels: list[JSONValue] = [type(c).__name__ for c in self.channels]
        return {
            "approvers": approvers,
            "expires_after_seconds": self.expires_after,
            "require_signature": self.require_signature,
            "channels": channels,
        }


def new_request_id() -> str:
    return "apr-" + secrets.token_hex(8)


class Waiter:
    """One request being waited for by the engine."""

    def __init__(
        self, approvals: Approvals, store: LogStore, clock: Clock, request: ApprovalRequest
    ) -> None:
        self.approvals = approvals
        self.clock = clock
        self.request = request
        self.book = ApprovalBook()
        self.follower = LogFollower(store)
        self.counted: dict[str, str] = {}
        self.ignored: list[str] = []

    def look(self, digest: str) -> str | None:
        """Read new records; the decision once there is one (``approved``/``denied``/...)."""
        for record in self.follower.new_records():
            self.book.take(record)
        request = self.request
        for vote in self.book.votes.get(request.id, []):
            if vote.approver in self.counted:
                continue  # each approver counts once
            problem = check_vote(vote, request, self.book.keys, digest)
            if problem is None and self.approvals.require_signature and vote.signature is None:
                problem = "an unsigned vote, but signatures are required"
            if problem is not None:
                self.ignored.append(f"{vote.approver}: {problem}")
                continue
            self.counted[vote.approver] = vote.decision
            if vote.decision == "deny":
                return "denied"
        if sum(1 for d in self.counted.values() if d == "approve") >= request.quorum:
            return "approved"
        if self.clock.now() >= request.expires_at:
            return "expired"
        return None

    def decision_data(self, decision: str) -> dict[str, JSONValue]:
        return {
            "request": self.request.id,
            "ordinal": self.request.ordinal,
            "decision": decision,
            "digest": self.request.digest,
            "by": list[JSONValue](sorted(a for a, d in self.counted.items() if d == "approve")),
            "denied_by": list[JSONValue](sorted(a for a, d in self.counted.items() if d == "deny")),
            "ignored": list[JSONValue](self.ignored[-20:]),
        }

    def wait(self, digest: str) -> str:
        while True:
            decision = self.look(digest)
            if decision is not None:
                return decision
            self.clock.sleep(self.approvals.poll)


class ApprovalRefused(AgentSagaError):
    """A vote that changes nothing; the reason is also logged as ``approval.refused``."""


@dataclass(frozen=True)
class VoteResult:
    """What :func:`submit_vote` did: ``accepted`` (logged as a vote) or refused, and why."""

    accepted: bool
    message: str
    request: ApprovalRequest | None


def submit_vote(
    store: LogStore,
    request_id: str,
    approver: str,
    decision: str,
    *,
    channel: str,
    note: str = "",
    signature: str | None = None,
    nonce: str | None = None,
    key: str | None = None,
    now: float | None = None,
) -> VoteResult:
    """Log one approver's vote on a request, after checking it can count.

    A vote that cannot count (unknown or already decided request, expired, approver not
    allowed, bad signature, replayed nonce) is logged as ``approval.refused`` and changes
    nothing. The waiting engine checks every vote again when it counts it.
    """
    if decision not in ("approve", "deny"):
        raise ValueError(f"decision is 'approve' or 'deny', got {decision!r}")
    at = time.time() if now is None else now
    book = ApprovalBook().take_all(store.records())
    request = book.find(request_id)
    problem = _refusal(book, request, approver, at, nonce)
    vote = Vote(request_id, approver, decision, note, channel, at, signature, nonce, key)
    if problem is None and request is not None:
        problem = check_vote(vote, request, book.keys, request.digest)
    data: dict[str, JSONValue] = {
        "request": request.id if request is not None else request_id,
        "saga": request.saga if request is not None else None,
        "by": approver,
        "decision": decision,
        "channel": channel,
        "note": note[:2000],
        "at": at,
    }
    if problem is not None:
        data["reason"] = problem
        store.append([Entry(REFUSED, None, data, int(at * 1000))], sync=True)
        return VoteResult(False, problem, request)
    for name, value in (("signature", signature), ("nonce", nonce), ("key", key)):
        if value is not None:
            data[name] = value
    store.append([Entry(VOTE, None, data, int(at * 1000))], sync=True)
    return VoteResult(True, f"{decision} recorded for {request_id}", request)


def _refusal(
    book: ApprovalBook, request: ApprovalRequest | None, approver: str, at: float, nonce: str | None
) -> str | None:
    if request is None:
        return "no such approval request"
    if request.id in book.decided:
        return f"already decided: {book.decided[request.id]}"
    if request.saga in book.ended_sagas:
        return "its saga has ended"
    if at >= request.expires_at:
        return "the request has expired"
    if approver not in request.approvers:
        return f"{approver} may not approve this request"
    if any(v.approver == approver for v in book.votes.get(request.id, [])):
        return f"{approver} has already voted on this request"
    if nonce is not None and nonce in book.used_nonces:
        return "this signature was already used (replay)"
    return None


def log_request(record_data: dict[str, JSONValue]) -> tuple[str, dict[str, JSONValue]]:
    """The kind and data of a request record (for the engine's own log call)."""
    return REQUESTED, record_data


def log_decision(waiter: Waiter, decision: str) -> tuple[str, dict[str, JSONValue]]:
    return DECIDED, waiter.decision_data(decision)


def is_approval_record(record: Record) -> bool:
    return record.kind in (REQUESTED, VOTE, REFUSED, DECIDED)
