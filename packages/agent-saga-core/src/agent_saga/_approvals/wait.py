"""Waiting for approvals: the engine's side of a step that needs humans.

On a ``RequireApproval`` decision the engine hands the step to :meth:`Approvals.approve_step`,
which logs the request durably, tells the configured channels, then watches the log for votes
(``votes.py`` writes them) until the quorum approves, an allowed approver denies, or the
request expires; it logs the decision durably. The digest is computed from the arguments about
to run, and again once the humans have decided, so arguments changed while waiting are refused.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

from .._engine.runtime import ApprovalStep
from .._errors import ConfigurationError
from .._log.codec import JSONValue, to_jsonable
from .._log.follow import LogFollower
from .._log.records import Kind
from .._log.store import LogStore
from ..proofs._passkey import EXTRA_MISSING, PASSKEY_LIMIT, webauthn_available
from .request import VOTE, ApprovalBook, ApprovalRequest, action_digest, check_vote
from .votes import _BOOKS

if TYPE_CHECKING:
    from .._clock import Clock

__all__ = ["ApprovalChannel", "Approvals"]

_RESTART = "restart"
"""What :meth:`Waiter._read` returns when the log must be read again from its first record."""

UNSIGNED_LIMIT = (
    "approvals are unsigned (require_signature=False): a vote names its approver but proves "
    "nothing, so it rests on the file permissions of the home (or the PostgreSQL role's "
    "grants): any process that can write the log can approve as any allowed approver; "
    "use Approvals(require_signature=True) where a forged approval would move money"
)
SIGNED_LIMIT = (
    "signed approvals rest on the approver keys: a key counts only when a trusted "
    "administrator key (admin_keys, configured outside the home) or the approver's own "
    "current key registered it, so whoever holds an administrator key, or can change the "
    "admin_keys configuration, can register a key for any approver"
)


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
        require_signature: count only signed votes: Ed25519 (``agent-saga approve --sign``)
            or passkey.
        require_passkey: count only passkey (WebAuthn) votes, each checked against the
            approver's registered passkey and the arguments about to run. Needs the
            ``agent-saga[passkeys]`` extra (:class:`ConfigurationError` without it).
        poll: seconds between looks at the log while waiting.
    """

    def __init__(
        self,
        *,
        approvers: Iterable[str] = (),
        expires_after: float = 600.0,
        channels: Sequence[ApprovalChannel] = (),
        require_signature: bool = False,
        require_passkey: bool = False,
        poll: float = 0.05,
    ) -> None:
        if isinstance(approvers, str):
            raise ConfigurationError("approvers takes a list of ids, not one string")
        if expires_after <= 0 or poll <= 0:
            raise ConfigurationError("expires_after and poll must be positive")
        self.approvers = tuple(approvers)
        self.expires_after = expires_after
        self.channels = tuple(channels)
        if require_passkey and not webauthn_available():
            raise ConfigurationError(f"Approvals(require_passkey=True): {EXTRA_MISSING}")
        self.require_signature = require_signature
        self.require_passkey = require_passkey
        self.poll = poll

    def describe(self) -> dict[str, JSONValue]:
        """The manifest's ``approvals`` section; its ``not_claimed`` lines say what a vote
        rests on (the kit adds them to the manifest's ``not_claimed``)."""
        approvers: list[JSONValue] = list(self.approvers)
        channels: list[JSONValue] = [type(c).__name__ for c in self.channels]
        return {
            "approvers": approvers,
            "expires_after_seconds": self.expires_after,
            "require_signature": self.require_signature,
            "require_passkey": self.require_passkey,
            "channels": channels,
            "not_claimed": [self._limit()],
        }

    def pause(self, request: ApprovalRequest, clock: Clock, seconds: float) -> None:
        """Wait before the waiting step looks at the log again: ``seconds`` (``poll``) here. A
        subclass whose channel writes the votes may return as soon as it has written some;
        returning early only makes the step look sooner."""
        clock.sleep(seconds)

    def _limit(self) -> str:
        if self.require_passkey:
            return PASSKEY_LIMIT
        return SIGNED_LIMIT if self.require_signature else UNSIGNED_LIMIT

    def approve_step(self, step: ApprovalStep) -> tuple[str, str] | None:
        """Block until the step is approved (``None``) or not (``(rule, reason)`` to refuse with).

        The request and the decision are durable records of the step's saga.
        """
        decision, spec, ref, clock = step.decision, step.spec, step.ref, step.clock
        approvers = decision.approvers or self.approvers
        if not approvers:
            return decision.rule, f"{decision.reason}; no approver is configured"
        digest = action_digest(spec.name, spec.semantics_value, to_jsonable(step.args))
        now = clock.now()
        request = ApprovalRequest(
            id=new_request_id(),
            saga=step.saga_id,
            ordinal=ref.ordinal,
            tool=spec.name,
            semantics=spec.semantics_value,
            digest=digest,
            args=step.shown_args,
            rule=decision.rule,
            reason=decision.reason,
            approvers=tuple(approvers),
            quorum=max(1, decision.quorum),
            requested_at=now,
            expires_at=now + self.expires_after,
        )
        step.log(Kind.APPROVAL_REQUESTED, request.to_data(), True)
        step.requested(decision.reason)
        waiter = Waiter(self, step.store, clock, request)  # before anyone can vote on it
        for channel in self.channels:
            try:
                channel.request_posted(request)
            except Exception as exc:  # a failing channel must not decide anything
                step.log(Kind.APPROVAL_REFUSED, _channel_error(request, channel, exc), False)
        outcome = waiter.wait(digest)
        if outcome == "approved":
            executed = action_digest(spec.name, spec.semantics_value, to_jsonable(step.args))
            if executed != digest:
                outcome = "arguments_changed"
        decided = waiter.decision_data(outcome)
        step.log(Kind.APPROVAL_DECIDED, decided, True)
        by = decided["by"]
        step.decided(outcome, tuple(str(a) for a in by) if isinstance(by, list) else ())
        for channel in self.channels:
            try:
                channel.request_decided(request, outcome)
            except Exception:  # noqa: S112 - the decision is logged; the message may lag
                continue
        if outcome == "approved":
            return None
        return "approval", f"{decision.reason}: {outcome} (request {request.id})"


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
        self.store = store
        seeded = _BOOKS.seed(store, request.id)
        self.book, self.follower = seeded or (ApprovalBook(), LogFollower(store))
        """Votes are read from the records after the request's (the process's shared book
        brought the keys up to there), or from the log's first record on other stores."""
        self.counted: dict[str, str] = {}
        self.ignored: list[str] = []
        self.checked = 0
        """How many of the request's votes have been checked."""

    def look(self, digest: str) -> str | None:
        """Read new records; the decision once there is one (``approved``/``denied``/...).

        Each vote is checked where it stands in the log, with the keys registered (and not
        revoked) before it, as certify checks it. When the trusted administrator keys differ
        from those the book's key records were judged with, the log is read again from its
        first record before any further vote is counted (a key an administrator no longer
        trusted registered never counts, even for a wait that began before the change).
        """
        found: str | None = None
        while (found := self._read(digest)) == _RESTART:
            self.book, self.follower = ApprovalBook(), LogFollower(self.store)
            self.counted, self.ignored, self.checked = {}, [], 0
        if found is not None:
            return found
        if self.clock.now() >= self.request.expires_at:
            return "expired"
        return None

    def _read(self, digest: str) -> str | None:
        """Take the new records, counting the votes among them; a decision, :data:`_RESTART`
        when the trusted administrators changed, or ``None``."""
        found: str | None = None
        trust_checked = False
        for record in self.follower.new_records():
            if record.kind == VOTE and not trust_checked:
                trust_checked = True  # the admin keys are read once per look with votes
                if self.book.keys.trust_changed():
                    return _RESTART
            self.book.take(record)
            if found is None and record.kind == VOTE:
                found = self._count(digest)
        return found

    def _count(self, digest: str) -> str | None:
        """Check the request's votes not checked yet; ``approved``/``denied`` once decided."""
        request = self.request
        votes = self.book.votes.get(request.id, [])
        fresh, self.checked = votes[self.checked :], len(votes)
        for vote in fresh:  # each vote is checked once (a passkey check costs a verification)
            if vote.approver in self.counted:
                continue  # each approver counts once
            problem = check_vote(vote, request, self.book.keys, digest)
            signed = vote.signature is not None or vote.passkey is not None
            if problem is None and self.approvals.require_signature and not signed:
                problem = "an unsigned vote, but signatures are required"
            if problem is None and self.approvals.require_passkey and vote.passkey is None:
                problem = "a vote without a passkey, but passkeys are required"
            if problem is not None:
                self.ignored.append(f"{vote.approver}: {problem}")
                continue
            self.counted[vote.approver] = vote.decision
            if vote.decision == "deny":
                return "denied"
        if sum(1 for d in self.counted.values() if d == "approve") >= request.quorum:
            return "approved"
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
            self.approvals.pause(self.request, self.clock, self.approvals.poll)


def _channel_error(
    request: ApprovalRequest, channel: object, exc: Exception
) -> dict[str, JSONValue]:
    return {
        "request": request.id,
        "by": type(channel).__name__,
        "reason": f"channel failed: {type(exc).__name__}: {exc}"[:500],
    }
