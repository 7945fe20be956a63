"""The kill switch row and the control plane's audit trail.

Halting and resuming change the one ``kill_switch`` row and append an ``audit`` event in the
same transaction, so no change goes unaudited; ``version`` grows with every change, and the
``changes`` row for ``killswitch`` tells every replica's watcher to push the new state.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

from .approvals import bump
from .db import Database, Tx
from .tokens import Caller


@dataclass(frozen=True)
class SwitchState:
    halted: bool
    reason: str
    since: float | None
    version: int


@dataclass(frozen=True)
class AuditEvent:
    id: str
    at: float
    actor: str
    scope: str
    action: str
    details: dict[str, Any]


def read_switch(tx: Tx) -> SwitchState:
    row = tx.one("SELECT halted, reason, since, version FROM kill_switch WHERE id = 1")
    if row is None:  # the row is created with the tables; a missing one reads as halted
        return SwitchState(True, "kill switch row missing", None, -1)
    return SwitchState(bool(row[0]), str(row[1]), row[2], int(row[3]))


def switch_state(db: Database) -> SwitchState:
    with db.transaction(write=False) as tx:
        return read_switch(tx)


def audit(tx: Tx, caller: Caller | None, action: str, details: dict[str, Any]) -> None:
    """Append an audit event (in the caller's transaction)."""
    ident = f"{time.time_ns():020d}-{secrets.token_hex(4)}"
    actor = caller.subject if caller is not None else "cli"
    scope = caller.scope if caller is not None else "local"
    tx.execute(
        "INSERT INTO audit (id, at, actor, scope, action, details) VALUES (?, ?, ?, ?, ?, ?)",
        (ident, time.time(), actor, scope, action, json.dumps(details, sort_keys=True)),
    )


def halt(db: Database, caller: Caller | None, reason: str) -> SwitchState:
    """Engage the fleet's kill switch; committed (and audited) when this returns."""
    with db.transaction() as tx:
        tx.execute(
            "UPDATE kill_switch SET halted = 1, reason = ?, since = ?, version = version + 1 "
            "WHERE id = 1",
            (reason, time.time()),
        )
        audit(tx, caller, "halt", {"reason": reason})
        bump(tx, "killswitch")
        return read_switch(tx)


def resume(db: Database, caller: Caller | None, reason: str) -> SwitchState:
    """Release the fleet's kill switch; committed (and audited) when this returns."""
    with db.transaction() as tx:
        tx.execute(
            "UPDATE kill_switch SET halted = 0, reason = '', since = NULL, "
            "version = version + 1 WHERE id = 1"
        )
        audit(tx, caller, "resume", {"reason": reason})
        bump(tx, "killswitch")
        return read_switch(tx)


def audit_events(
    db: Database, limit: int, after: str | None, *, newest_first: bool = False
) -> list[AuditEvent]:
    """Audit events in time order (or newest first), those after the event ``after``."""
    sql = "SELECT id, at, actor, scope, action, details FROM audit"
    params: list[Any] = []
    if after is not None:
        sql += " WHERE id < ?" if newest_first else " WHERE id > ?"
        params.append(after)
    order = " ORDER BY id DESC" if newest_first else " ORDER BY id"
    with db.transaction(write=False) as tx:
        rows = tx.all(sql + order + " LIMIT ?", [*params, limit])
    return [AuditEvent(i, a, ac, s, act, json.loads(d)) for i, a, ac, s, act, d in rows]


def versions(db: Database) -> dict[str, int]:
    """Every topic's change counter (what the watchers poll)."""
    with db.transaction(write=False) as tx:
        return _versions(tx)


def _versions(tx: Tx) -> dict[str, int]:
    return {str(t): int(v) for t, v in tx.all("SELECT topic, version FROM changes")}


def versions_and_switch(db: Database) -> tuple[dict[str, int], SwitchState]:
    """:func:`versions` and :func:`switch_state` in one read transaction (a watcher's look)."""
    with db.transaction(write=False) as tx:
        return _versions(tx), read_switch(tx)


__all__ = [
    "AuditEvent",
    "SwitchState",
    "audit",
    "audit_events",
    "halt",
    "read_switch",
    "resume",
    "switch_state",
    "versions",
    "versions_and_switch",
]
