"""What the dashboard acts on when it serves a plain home (``agent-saga ui``): the home's own
kill switch and approvals, the ones a kit on that home reads.

A kit on a plain home refuses effects while the home's ``HALT`` file exists and counts the
votes in the home's own log; the control plane's tables are only a copy of that log (shipped as
origin ``local``). So in ``ui`` mode the kill switch form halts and resumes the home as
``agent-saga halt`` and ``resume`` do (the ``HALT`` file, and a ``control.halt`` or
``control.resume`` record in the home's log), besides the control plane's switch; and the
approval queue lists the home's pending requests and writes each vote to the home's log as
``agent-saga approve`` does (:func:`agent_saga.submit_vote`, which checks the request, its
allowed approvers, expiry and single use; the waiting engine checks the vote again).

The pending requests are read from the shipped copy: each running saga of origin ``local``
(one indexed read per saga), its ``approval.requested`` records without an ``approval.decided``,
and the log's ``approval.vote`` records after the oldest of them (an indexed range).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent_saga import AgentKit, FileKillSwitch, HaltState, VoteResult, submit_vote

from ..store.approvals import ApprovalRow, VoteRow
from ..store.db import Database

LOCAL_ORIGIN = "local"
MAX_PENDING = 200


class LocalHome:
    """The home ``agent-saga ui`` serves.

    One kit on the home (opened on first use, configured as the command line's: chain key)
    writes the halts, resumes and votes, so the log is appended to with the home's key and a
    vote reads only what the log gained since the last one. Safe to share between threads.

    Args:
        path: the home directory.
        open_kit: opens a kit on the home (``Settings.open_kit``).
    """

    def __init__(self, path: Path, open_kit: Callable[..., AgentKit]) -> None:
        self.path = path
        self._open_kit = open_kit
        self._kit: AgentKit | None = None
        self._lock = threading.Lock()

    def kit(self) -> AgentKit:
        with self._lock:
            if self._kit is None:
                self._kit = self._open_kit(checkpoints=False)
            return self._kit

    def close(self) -> None:
        with self._lock:
            if self._kit is not None:
                self._kit.close()
                self._kit = None

    def switch_state(self) -> HaltState:
        """The home's kill switch as its agents read it (the ``HALT`` file)."""
        return FileKillSwitch(self.path).state()

    def halt(self, reason: str) -> None:
        """Engage the home's kill switch; durable (``HALT`` fsynced, then the record) on return."""
        self.kit().halt(reason)

    def resume(self) -> None:
        """Record the release in the home's log, then remove ``HALT`` (agents may act again)."""
        if self.switch_state().halted:
            self.kit().resume()

    def vote(self, request_id: str, approver: str, decision: str, note: str) -> VoteResult:
        """Log ``approver``'s vote in the home's log (a vote that cannot count is logged as
        refused and changes nothing; ``accepted`` says which)."""
        store = self.kit().store
        return submit_vote(store, request_id, approver, decision, channel="dashboard", note=note)


def pending(db: Database, origin: str = LOCAL_ORIGIN) -> list[ApprovalRow]:
    """The undecided, unexpired approval requests of ``origin``'s running sagas, oldest first,
    with the votes cast on them so far, as the shipped copy of its log has them."""
    now = time.time()
    requests: dict[str, ApprovalRow] = {}
    first = None
    with db.transaction(write=False) as tx:
        sagas = tx.all(
            "SELECT saga FROM sagas WHERE origin = ? AND status IN ('running', 'needs_human')",
            (origin,),
        )
        for (saga,) in sagas:
            rows = tx.all(
                "SELECT seq, kind, data FROM records WHERE origin = ? AND saga = ? AND kind IN "
                "('approval.requested', 'approval.decided') ORDER BY seq",
                (origin, saga),
            )
            for seq, kind, data in rows:
                fields = json.loads(data)
                if kind == "approval.requested":
                    row = _request(origin, str(saga), fields)
                    if row is not None and row.expires_at > now:
                        requests[row.id] = row
                        first = seq if first is None else min(first, seq)
                elif isinstance(fields, dict):
                    requests.pop(str(fields.get("request")), None)
        if requests:  # votes are records of the log (no saga), after their request
            votes = tx.all(
                "SELECT data FROM records WHERE origin = ? AND kind = 'approval.vote' "
                "AND saga IS NULL AND seq > ? ORDER BY seq",
                (origin, first),
            )
            for (data,) in votes:
                _count_vote(requests, json.loads(data))
    found = sorted(requests.values(), key=lambda r: (r.requested_at, r.id))
    return found[:MAX_PENDING]


def _count_vote(requests: dict[str, ApprovalRow], data: Any) -> None:
    if isinstance(data, dict) and str(data.get("request")) in requests:
        requests[str(data["request"])].votes.append(
            VoteRow(str(data.get("by", "")), str(data.get("decision", "")),
                    str(data.get("note", "")), float(data.get("at", 0) or 0))
        )  # fmt: skip


def _request(origin: str, saga: str, data: dict[str, Any]) -> ApprovalRow | None:
    try:
        return ApprovalRow(
            id=str(data["request"]), origin=origin, saga=saga, ordinal=int(data["ordinal"]),
            tool=str(data["tool"]), semantics=str(data["semantics"]), digest=str(data["digest"]),
            args=data.get("args"), rule=str(data.get("rule", "")),
            reason=str(data.get("reason", "")), approvers=[str(a) for a in data["approvers"]],
            quorum=int(data["quorum"]), requested_at=float(data["requested_at"]),
            expires_at=float(data["expires_at"]), status="pending", decided_at=None,
            outcome=None, votes=[],
        )  # fmt: skip
    except (KeyError, TypeError, ValueError):
        return None


__all__ = ["LOCAL_ORIGIN", "LocalHome", "pending"]
