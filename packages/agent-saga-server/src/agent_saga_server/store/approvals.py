"""Approvals on the server: agents create requests, approvers vote, each request decided once.

The rules are the core's (``docs/approvals.md``): a request names its allowed approvers (``*``
allows every approver token of the server) and a quorum; each allowed approver votes once; one
deny decides ``denied``; ``quorum`` distinct approvals decide ``approved``; a request not
decided by ``expires_at`` is ``expired``. The voter is the subject of the approver token that
cast the vote, never a name from the request body. Each vote runs in one transaction with the
request's row locked, so two replicas taking two votes at once see each other, and a decided
request takes no more votes.

A request is committed without waiting for the disk (``flush=False``, see :mod:`.db`): it is
on the path of every approval, and what makes it durable comes next anyway: a vote on it is a
flushed commit, which flushes the request committed before it. Until then a host crash can
lose it; the agent, which keeps its request in its own durable log, posts it again when the
server answers that it does not know it (creation is idempotent by id). A request is never
decided unless the vote that decides it is durable.

The waiting agent reads the decision and the votes (``GET .../approvals/{id}``), writes them to
its own log and decides there too; the ``approval.decided`` record it ships back is kept as the
request's ``outcome``.

A vote cast with a passkey keeps its proof (the WebAuthn assertion, its challenge's inputs and
the approver's registered key, as the dashboard verified them) in ``approval_vote_proofs``,
written in the vote's transaction; the agent writes it into its log with the vote, where its
engine and certify check it again.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from typing import Any

from .db import Database, Tx


class ApprovalRefused(Exception):
    """A request or vote that cannot be taken; ``status`` is 403, 404 or 409."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class VoteRow:
    approver: str
    decision: str
    note: str
    at: float
    passkey: dict[str, Any] | None = None


@dataclass(frozen=True)
class ApprovalRow:
    id: str
    origin: str
    saga: str
    ordinal: int
    tool: str
    semantics: str
    digest: str
    args: Any
    rule: str
    reason: str
    approvers: list[str]
    quorum: int
    requested_at: float
    expires_at: float
    status: str
    decided_at: float | None
    outcome: str | None
    votes: list[VoteRow] = field(default_factory=list)


_COLUMNS = (
    "id, origin, saga, ordinal, tool, semantics, digest, args, rule, reason, approvers, quorum, "
    "requested_at, expires_at, status, decided_at, outcome"
)


def _row(tx: Tx, row: tuple[Any, ...], now: float) -> ApprovalRow:
    values = list(row)
    values[7] = json.loads(values[7])
    values[10] = json.loads(values[10])
    if values[14] == "pending" and now >= float(values[13]):
        values[14] = "expired"
    votes = tx.all(
        "SELECT v.approver, v.decision, v.note, v.at, p.passkey FROM approval_votes v "
        "LEFT JOIN approval_vote_proofs p ON p.request = v.request AND p.approver = v.approver "
        "WHERE v.request = ? ORDER BY v.at",
        (values[0],),
    )
    rows = [
        VoteRow(str(a), str(d), str(n), float(t), json.loads(p) if p else None)
        for a, d, n, t, p in votes
    ]
    fields: list[Any] = [*values[:17], rows]
    return ApprovalRow(*fields)


def create(db: Database, origin: str, request: dict[str, Any]) -> tuple[ApprovalRow, bool]:
    """Store a request from ``origin``'s agent; ``(row, created)``.

    Idempotent by id: the same request again returns the stored one (``created`` false).
    Committed without waiting for the disk (see the module docstring): visible at once, durable
    against a host crash with the next flushed commit.

    Raises:
        ApprovalRefused: 409 when the id is taken by another request.
    """
    now = time.time()
    args_text = json.dumps(request["args"], sort_keys=True, separators=(",", ":"))
    approvers_text = json.dumps(request["approvers"])
    with db.transaction(flush=False) as tx:
        existing = tx.one(f"SELECT {_COLUMNS} FROM approvals WHERE id = ?", (request["id"],))
        if existing is not None:
            row = _row(tx, existing, now)
            same = (row.origin, row.saga, row.ordinal, row.digest) == (
                origin,
                request["saga"],
                request["ordinal"],
                request["digest"],
            )
            if not same:
                raise ApprovalRefused(409, f"approval id {request['id']} is taken")
            return row, False
        tx.execute(
            f"INSERT INTO approvals ({_COLUMNS}) VALUES "
            "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', NULL, NULL)",
            (
                request["id"], origin, request["saga"], request["ordinal"], request["tool"],
                request["semantics"], request["digest"], args_text, request["rule"],
                request["reason"], approvers_text, request["quorum"], now, request["expires_at"],
            ),
        )  # fmt: skip
        bump(tx, "approvals")
    # the row as inserted (no second read): the values bound above, JSON as stored
    created = ApprovalRow(
        request["id"], origin, request["saga"], request["ordinal"], request["tool"],
        request["semantics"], request["digest"], json.loads(args_text), request["rule"],
        request["reason"], json.loads(approvers_text), request["quorum"], now,
        request["expires_at"], "expired" if now >= request["expires_at"] else "pending",
        None, None,
    )  # fmt: skip
    return created, True


def get(db: Database, request_id: str) -> ApprovalRow | None:
    with db.transaction(write=False) as tx:
        found = tx.one(f"SELECT {_COLUMNS} FROM approvals WHERE id = ?", (request_id,))
        return None if found is None else _row(tx, found, time.time())


def list_approvals(
    db: Database,
    status: str | None,
    origin: str | None,
    limit: int,
    after: str | None,
    *,
    saga: str | None = None,
) -> list[ApprovalRow]:
    """Requests, oldest first (by request time, then id), after the request ``after`` (none
    when that id is unknown); optionally only ``pending`` (undecided and unexpired) ones."""
    now = time.time()
    clauses: list[str] = []
    params: list[Any] = []
    if status == "pending":
        clauses.append("status = 'pending' AND expires_at > ?")
        params.append(now)
    elif status == "expired":
        clauses.append("(status = 'expired' OR (status = 'pending' AND expires_at <= ?))")
        params.append(now)
    elif status is not None:
        clauses.append("status = ?")
        params.append(status)
    for column, value in (("origin", origin), ("saga", saga)):
        if value is not None:
            clauses.append(f"{column} = ?")
            params.append(value)
    if after is not None:
        clauses.append(
            "(requested_at, id) > (SELECT a.requested_at, a.id FROM approvals a WHERE a.id = ?)"
        )
        params.append(after)
    sql = f"SELECT {_COLUMNS} FROM approvals"
    if clauses:
        sql += " WHERE " + " AND ".join(clauses)
    with db.transaction(write=False) as tx:
        rows = tx.all(sql + " ORDER BY requested_at, id LIMIT ?", [*params, limit])
        return [_row(tx, row, now) for row in rows]


def vote(
    db: Database,
    request_id: str,
    approver: str,
    decision: str,
    note: str,
    token_id: str,
    passkey: dict[str, Any] | None = None,
) -> ApprovalRow:
    """Record ``approver``'s vote and decide the request when the vote decides it.

    ``passkey``: the vote's verified passkey proof, kept with it (same transaction).

    Raises:
        ApprovalRefused: 404 unknown request; 403 an approver the request does not allow;
            409 decided, expired, or this approver already voted.
    """
    now = time.time()
    with db.transaction() as tx:
        found = tx.one(
            f"SELECT {_COLUMNS} FROM approvals WHERE id = ?" + tx.lock_rows(), (request_id,)
        )
        if found is None:
            raise ApprovalRefused(404, f"no approval request {request_id}")
        row = _row(tx, found, now)
        if row.status == "expired":
            tx.execute(
                "UPDATE approvals SET status = 'expired', decided_at = ? WHERE id = ? "
                "AND status = 'pending'",
                (row.expires_at, request_id),
            )
            raise ApprovalRefused(409, f"approval request {request_id} has expired")
        if row.status != "pending":
            raise ApprovalRefused(409, f"approval request {request_id} is already {row.status}")
        if "*" not in row.approvers and approver not in row.approvers:
            raise ApprovalRefused(403, f"{approver} may not decide approval request {request_id}")
        if any(v.approver == approver for v in row.votes):
            raise ApprovalRefused(409, f"{approver} has already voted on {request_id}")
        tx.execute(
            "INSERT INTO approval_votes (request, approver, decision, note, at, token_id) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (request_id, approver, decision, note, now, token_id),
        )
        proof = None if passkey is None else json.dumps(passkey, sort_keys=True)
        if proof is not None:
            tx.execute(
                "INSERT INTO approval_vote_proofs (request, approver, passkey) VALUES (?, ?, ?)",
                (request_id, approver, proof),
            )
        approvals = 1 + sum(1 for v in row.votes if v.decision == "approve")
        status = None
        if decision == "deny":
            status = "denied"
        elif approvals >= row.quorum:
            status = "approved"
        if status is not None:
            tx.execute(
                "UPDATE approvals SET status = ?, decided_at = ? WHERE id = ?",
                (status, now, request_id),
            )
        bump(tx, "approvals")
    # the row as this transaction left it (no second read under the lock), the proof as a
    # read gives it back
    cast = VoteRow(approver, decision, note, now, None if proof is None else json.loads(proof))
    if status is None:
        return replace(row, votes=[*row.votes, cast])
    return replace(row, votes=[*row.votes, cast], status=status, decided_at=now)


def bump(tx: Tx, topic: str) -> None:
    """Tell every replica's watchers that ``topic`` changed (committed with the change): the
    topic's version grows, and the replicas listening are notified."""
    tx.execute("UPDATE changes SET version = version + 1 WHERE topic = ?", (topic,))
    tx.notify(topic)


__all__ = [
    "ApprovalRefused",
    "ApprovalRow",
    "VoteRow",
    "bump",
    "create",
    "get",
    "list_approvals",
    "vote",
]
