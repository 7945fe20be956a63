"""Bearer tokens: scoped, hashed at rest, compared in constant time, revocable, expiring.

A token reads ``asg_<id>_<secret>``: ``id`` (16 hex digits) names the row, ``secret`` is 32
random bytes in base64url. Only ``SHA-256(secret)`` is stored; a presented token is found by its
id and accepted when the SHA-256 of its secret equals the stored digest under
:func:`hmac.compare_digest` (over bytes, so no text can make the comparison raise). The secret
has 256 bits of entropy, so a plain hash (no salt, no slow KDF) is enough to make a stolen
table useless.

Scopes: ``agent`` (writes its own ``origin`` only), ``approver`` (decides approvals as its
``subject``), ``admin`` and ``auditor`` (reads everything, writes nothing).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass
from typing import Literal

from .db import Database, Tx

Scope = Literal["agent", "approver", "admin", "auditor"]
SCOPES: tuple[Scope, ...] = ("agent", "approver", "admin", "auditor")
_TOKEN = re.compile(r"asg_([0-9a-f]{16})_([A-Za-z0-9_-]{43})")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")
"""What an origin or a subject may look like (they end up in URLs and records)."""


@dataclass(frozen=True)
class Caller:
    """Who presented a valid token."""

    token_id: str
    scope: Scope
    subject: str
    origin: str | None

    @property
    def actor(self) -> str:
        return f"{self.scope}:{self.subject}"


@dataclass(frozen=True)
class TokenInfo:
    """A token as listed (never its secret)."""

    id: str
    scope: Scope
    subject: str
    origin: str | None
    created_at: float
    expires_at: float | None
    revoked_at: float | None


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("ascii")).digest()


def issue(
    db: Database,
    scope: Scope,
    subject: str,
    *,
    origin: str | None = None,
    expires_at: float | None = None,
    created_by: str = "cli",
    tx: Tx | None = None,
) -> tuple[str, TokenInfo]:
    """Create a token; returns the token text (shown once, never stored) and its row.

    Raises:
        ValueError: an unknown scope, a malformed subject or origin, or an agent token
            without an origin.
    """
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    if not NAME.fullmatch(subject):
        raise ValueError(f"subject must match {NAME.pattern}, got {subject!r}")
    if scope == "agent":
        origin = origin or subject
        if not NAME.fullmatch(origin):
            raise ValueError(f"origin must match {NAME.pattern}, got {origin!r}")
    else:
        origin = None
    token_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    now = time.time()
    row = (token_id, _digest(secret).hex(), scope, subject, origin, now, expires_at, created_by)
    sql = (
        "INSERT INTO tokens (id, digest, scope, subject, origin, created_at, expires_at, "
        "created_by) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
    )
    if tx is not None:
        tx.execute(sql, row)
    else:
        with db.transaction() as own:
            own.execute(sql, row)
    info = TokenInfo(token_id, scope, subject, origin, now, expires_at, None)
    return f"asg_{token_id}_{secret}", info


def authenticate(db: Database, presented: str, now: float | None = None) -> Caller | None:
    """The caller a presented token belongs to, or ``None`` (malformed, unknown, expired or
    revoked). Never raises on the token's content."""
    found = _TOKEN.fullmatch(presented) if presented.isascii() else None
    if found is None:
        return None
    token_id, secret = found.groups()
    with db.transaction(write=False) as tx:
        row = tx.one(
            "SELECT digest, scope, subject, origin, expires_at, revoked_at FROM tokens "
            "WHERE id = ?",
            (token_id,),
        )
    if row is None:
        return None
    digest, scope, subject, origin, expires_at, revoked_at = row
    if not hmac.compare_digest(bytes.fromhex(digest), _digest(secret)):
        return None
    at = time.time() if now is None else now
    if revoked_at is not None or (expires_at is not None and at >= expires_at):
        return None
    return Caller(token_id, scope, subject, origin)


def revoke(db: Database, token_id: str, tx: Tx | None = None) -> bool:
    """Revoke a token now; False when there is no such token (revoking twice is fine)."""
    sql = "UPDATE tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL"
    if tx is None:
        with db.transaction() as own:
            return _revoke(own, sql, token_id)
    return _revoke(tx, sql, token_id)


def _revoke(tx: Tx, sql: str, token_id: str) -> bool:
    if tx.one("SELECT id FROM tokens WHERE id = ?", (token_id,)) is None:
        return False
    tx.execute(sql, (time.time(), token_id))
    return True


def list_tokens(db: Database) -> list[TokenInfo]:
    with db.transaction(write=False) as tx:
        rows = tx.all(
            "SELECT id, scope, subject, origin, created_at, expires_at, revoked_at FROM tokens "
            "ORDER BY created_at, id"
        )
    return [TokenInfo(*row) for row in rows]


def has_admin(db: Database) -> bool:
    """Whether any admin token exists (revoked ones count: the first one is printed once)."""
    with db.transaction(write=False) as tx:
        return tx.one("SELECT id FROM tokens WHERE scope = 'admin' LIMIT 1") is not None


def first_admin(db: Database) -> str | None:
    """Create the first admin token if there is none yet; its text, or ``None``.

    Atomic across replicas: only the process whose transaction finds no admin creates one.
    """
    with db.transaction() as tx:
        if tx.one("SELECT id FROM tokens WHERE scope = 'admin' LIMIT 1" + tx.lock_rows()):
            return None
        if tx.lock_rows():  # PostgreSQL: serialize the check-then-insert across replicas
            tx.execute("SELECT pg_advisory_xact_lock(7172018)")
            if tx.one("SELECT id FROM tokens WHERE scope = 'admin' LIMIT 1") is not None:
                return None
        text, _ = issue(db, "admin", "admin", created_by="first start", tx=tx)
        return text


def approver_subjects(db: Database, now: float | None = None) -> list[str]:
    """The subjects of the approver tokens that are valid now."""
    at = time.time() if now is None else now
    with db.transaction(write=False) as tx:
        rows = tx.all(
            "SELECT DISTINCT subject FROM tokens WHERE scope = 'approver' AND revoked_at IS NULL "
            "AND (expires_at IS NULL OR expires_at > ?) ORDER BY subject",
            (at,),
        )
    return [str(row[0]) for row in rows]


__all__ = [
    "NAME",
    "SCOPES",
    "Caller",
    "Scope",
    "TokenInfo",
    "approver_subjects",
    "authenticate",
    "first_admin",
    "has_admin",
    "issue",
    "list_tokens",
    "revoke",
]
