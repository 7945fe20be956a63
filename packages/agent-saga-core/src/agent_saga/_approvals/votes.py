"""Giving approvals: one approver's vote, checked, then appended to the log.

Votes can come from any process sharing the log (the CLI, a Slack app). :func:`submit_vote`
refuses a vote that cannot count, logging why; the waiting engine (``wait.py``) checks every
vote again when it counts it, so a vote written around this function gains nothing.

A process keeps, per store, the approval book of the log read so far and reads only what was
appended since (as the waiting engine does), so a vote costs what is new in the log, not the
log's age; a log that no longer continues what was read (rewritten) is read again in full.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._errors import CorruptLogError
from .._log.codec import JSONValue
from .._log.filestore import FileLogStore
from .._log.follow import LogFollower
from .._log.records import Entry
from .._log.store import LogStore
from ..proofs._passkey import passkey_evidence
from .request import REFUSED, VOTE, ApprovalBook, ApprovalRequest, Vote, check_vote

__all__ = ["VoteResult", "submit_vote"]


@dataclass(frozen=True)
class VoteResult:
    """What :func:`submit_vote` did: ``accepted`` (logged as a vote) or refused, and why."""

    accepted: bool
    message: str
    request: ApprovalRequest | None


class _Books:
    """Each store's approval book, brought up to date by reading only its new records.

    Invariant: a book is used only under ``lock``, which also covers the vote's append, so the
    votes of one process are checked and written one at a time. A forked child starts with a
    fresh lock and no books (the thread that held the lock, or was reading, is not in it).
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.lock = threading.Lock()
        self._kept: weakref.WeakKeyDictionary[LogStore, tuple[LogFollower, ApprovalBook]] = (
            weakref.WeakKeyDictionary()
        )

    def current(self, store: LogStore) -> ApprovalBook:
        """The book of everything ``store`` holds now (call with ``lock`` held)."""
        kept = self._follow(store)
        return ApprovalBook().take_all(store.records()) if kept is None else kept[1]

    def _follow(self, store: LogStore) -> tuple[LogFollower, ApprovalBook] | None:
        """``store``'s kept follower and book, brought up to date (call with ``lock`` held);
        ``None`` for a store that cannot be weakly referenced (nothing can be kept for it)."""
        try:
            follower, book = self._kept[store]
        except KeyError:
            follower, book = LogFollower(store), ApprovalBook()
        except TypeError:
            return None
        if book.keys.trust_changed():  # key records are judged again with today's admins
            follower, book = LogFollower(store), ApprovalBook()
        try:
            for record in follower.new_records():
                book.take(record)
        except CorruptLogError:  # rewritten since the last look: read it again
            follower, book = LogFollower(store), ApprovalBook()
            book.take_all(follower.new_records())
        self._kept[store] = (follower, book)
        return follower, book

    def seed(self, store: LogStore, request_id: str) -> tuple[ApprovalBook, LogFollower] | None:
        """A book and a follower for waiting on ``request_id`` without reading the log again
        from its first record: the book holds the keys and vote nonces of every record up to
        the shared book's point, the follower goes on after that point. ``None`` (read from the
        start) when no shared book follows ``store`` from a known point (not a file store), or
        when a vote for the request is already behind that point: each vote must be checked
        with the keys registered before it, and the copy holds the keys of later records."""
        if not isinstance(store, FileLogStore):
            return None  # its follower reads from the first record anyway: read once
        with self.lock:
            kept = self._follow(store)
            if kept is None or request_id in kept[1].votes:
                return None
            shared, book = kept
            follower = LogFollower(store)
            if not follower.start_at(shared.seen, shared.last, shared.offset):
                return None
            return book.for_one_request(), follower


_BOOKS = _Books()
os.register_at_fork(after_in_child=_BOOKS.reset)


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
    passkey: Mapping[str, Any] | None = None,
    now: float | None = None,
    sync: bool = True,
) -> VoteResult:
    """Log one approver's vote on a request, after checking it can count.

    A vote that cannot count (unknown or already decided request, expired, approver not
    allowed, bad signature, replayed nonce) is logged as ``approval.refused`` and changes
    nothing. The waiting engine checks every vote again when it counts it.

    With ``sync`` (the default) the record is durable when this returns. Without, it is
    written but becomes durable with the store's next durable append: the waiting engine's
    ``approval.decided`` record, appended durably before the step acts, is one. For a channel
    whose votes are also kept durably elsewhere (the control plane), which saves a sync per
    vote on the way to the decision.

    ``passkey`` is a WebAuthn assertion with its challenge's inputs (see
    :mod:`agent_saga.proofs._passkey`); its nonce is the vote's. The approver's passkey must
    already be registered in the log (:func:`~agent_saga._approvals.passkeys.register_passkey`).
    Only the evidence's checked fields are logged; evidence that is no mapping is refused as a
    malformed passkey assertion.
    """
    if decision not in ("approve", "deny"):
        raise ValueError(f"decision is 'approve' or 'deny', got {decision!r}")
    evidence = passkey_evidence(passkey) if passkey is not None else None
    if evidence is not None and nonce is None:
        inputs = evidence.get("challenge")
        found = inputs.get("nonce") if isinstance(inputs, Mapping) else None
        nonce = found if isinstance(found, str) and found else None
    proof = _Proof(signature, nonce, key, evidence)
    with _BOOKS.lock:
        return _submit(
            _BOOKS.current(store), store, request_id, approver, decision, channel, note,
            proof, time.time() if now is None else now, sync,
        )  # fmt: skip


@dataclass(frozen=True)
class _Proof:
    """What a vote carries to prove who gave it (all ``None``: an unsigned vote)."""

    signature: str | None
    nonce: str | None
    key: str | None
    passkey: dict[str, Any] | None


def _submit(
    book: ApprovalBook,
    store: LogStore,
    request_id: str,
    approver: str,
    decision: str,
    channel: str,
    note: str,
    proof: _Proof,
    at: float,
    sync: bool,
) -> VoteResult:
    request = book.find(request_id)
    problem = _refusal(book, request, approver, at, proof.nonce, proof.passkey is not None)
    vote = Vote(
        request_id, approver, decision, note, channel, at, proof.signature, proof.nonce,
        proof.key, proof.passkey,
    )  # fmt: skip
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
        store.append([Entry(REFUSED, None, data, int(at * 1000))], sync=sync)
        return VoteResult(False, problem, request)
    for name, value in (("signature", proof.signature), ("nonce", proof.nonce), ("key", proof.key)):
        if value is not None:
            data[name] = value
    if proof.passkey is not None:
        data["passkey"] = proof.passkey
    store.append([Entry(VOTE, None, data, int(at * 1000))], sync=sync)
    return VoteResult(True, f"{decision} recorded for {request_id}", request)


def _refusal(
    book: ApprovalBook,
    request: ApprovalRequest | None,
    approver: str,
    at: float,
    nonce: str | None,
    passkey: bool,
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
    earlier = [v for v in book.votes.get(request.id, []) if v.approver == approver]
    if any(v.passkey is not None or not passkey for v in earlier):
        # A passkey vote may follow the same approver's vote without one: under
        # ``require_passkey`` only the passkey vote counts.
        return f"{approver} has already voted on this request"
    if nonce is not None and nonce in book.used_nonces:
        return "this signature was already used (replay)"
    return None
