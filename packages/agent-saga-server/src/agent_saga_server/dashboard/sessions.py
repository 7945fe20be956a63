"""Dashboard logins and browser sessions, kept in the control plane's database.

* A **login link** carries a one-time token ``asl_<id>_<secret>``; only ``SHA-256(secret)`` is
  stored, it is compared with :func:`hmac.compare_digest`, it expires (10 minutes by default)
  and it is spent by the first exchange (a second use is refused, also by another replica: the
  row is marked used in the same transaction that reads it).
* A **session** is a cookie ``<id>.<secret>`` (HttpOnly, SameSite=Strict, set by the routes);
  again only the secret's digest is stored. Sessions expire (12 hours) and end at logout. A
  session opened with a pasted control-plane token is bound to it (``ui_session_tokens``): it
  ends when that token is revoked or expires, or when its row no longer has the scope and
  subject the session acts with, checked on every request.
* The **CSRF token** of a session is ``HMAC-SHA256(secret, "csrf")``: computed from the cookie
  on each request, so nothing more is stored, and useless without the cookie it came from.

Every function opens its own short transaction: nothing here lives in a process's memory, so
any replica serves any session.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass

from ..store.db import Database, create_missing_tables

LOGIN_TTL = 600.0
SESSION_TTL = 12 * 3600.0
COOKIE = "asg_ui"
_LOGIN = re.compile(r"asl_([0-9a-f]{16})_([A-Za-z0-9_-]{43})")
_SESSION = re.compile(r"([0-9a-f]{16})\.([A-Za-z0-9_-]{43})")
ROLES = ("admin", "approver", "auditor")

TABLES = (
    "CREATE TABLE IF NOT EXISTS ui_logins (id TEXT PRIMARY KEY, digest TEXT NOT NULL, "
    "subject TEXT NOT NULL, role TEXT NOT NULL, expires_at DOUBLE PRECISION NOT NULL, "
    "used_at DOUBLE PRECISION)",
    "CREATE TABLE IF NOT EXISTS ui_sessions (id TEXT PRIMARY KEY, digest TEXT NOT NULL, "
    "subject TEXT NOT NULL, role TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL, "
    "expires_at DOUBLE PRECISION NOT NULL)",
    "CREATE TABLE IF NOT EXISTS ui_session_tokens (session_id TEXT PRIMARY KEY, "
    "token_id TEXT NOT NULL)",
)


@dataclass(frozen=True)
class Viewer:
    """Who a valid session belongs to. ``role`` is a token scope (admin, approver, auditor)."""

    session_id: str
    subject: str
    role: str
    csrf: str

    @property
    def may_decide(self) -> bool:
        return self.role in ("admin", "approver")

    @property
    def may_control(self) -> bool:
        return self.role == "admin"


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("ascii")).hexdigest()


def _same(stored_hex: str, secret: str) -> bool:
    return hmac.compare_digest(bytes.fromhex(stored_hex), bytes.fromhex(_digest(secret)))


def create_tables(db: Database) -> None:
    """Create the dashboard's session tables if they are missing (idempotent)."""
    create_missing_tables(db, TABLES)


def mint_login(db: Database, subject: str, role: str, ttl: float = LOGIN_TTL) -> str:
    """A new one-time login token for ``subject`` acting as ``role``; durable when this
    returns. The text is returned once and never stored.

    Raises:
        ValueError: a role that is not admin, approver or auditor.
    """
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    login_id, secret = secrets.token_hex(8), secrets.token_urlsafe(32)
    with db.transaction() as tx:
        tx.execute(
            "INSERT INTO ui_logins (id, digest, subject, role, expires_at) VALUES (?, ?, ?, ?, ?)",
            (login_id, _digest(secret), subject, role, time.time() + ttl),
        )
    return f"asl_{login_id}_{secret}"


def spend_login(db: Database, presented: str) -> tuple[str, str] | None:
    """Spend a login token: its ``(subject, role)``, or ``None`` when it is malformed, unknown,
    expired or already used. A token is accepted at most once across every replica."""
    found = _LOGIN.fullmatch(presented) if presented.isascii() else None
    if found is None:
        return None
    login_id, secret = found.groups()
    now = time.time()
    with db.transaction() as tx:
        row = tx.one(
            "SELECT digest, subject, role, expires_at, used_at FROM ui_logins WHERE id = ?"  # noqa: S608
            + tx.lock_rows(),
            (login_id,),
        )
        if row is None or not _same(str(row[0]), secret):
            return None
        if row[4] is not None or now >= float(row[3]):
            return None
        tx.execute("UPDATE ui_logins SET used_at = ? WHERE id = ?", (now, login_id))
    return str(row[1]), str(row[2])


def open_session(db: Database, subject: str, role: str, token_id: str | None = None) -> str:
    """A new session for ``subject``; returns the cookie value (shown once, only hashed).

    ``token_id``: the control-plane token the session was opened with, if any; the session
    then lasts no longer than that token (revoked or expired, the session is over). The
    session and its binding are written in one transaction, durable when this returns.
    """
    session_id, secret = secrets.token_hex(8), secrets.token_urlsafe(32)
    now = time.time()
    with db.transaction() as tx:
        tx.execute(
            "INSERT INTO ui_sessions (id, digest, subject, role, created_at, expires_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (session_id, _digest(secret), subject, role, now, now + SESSION_TTL),
        )
        if token_id is not None:
            tx.execute(
                "INSERT INTO ui_session_tokens (session_id, token_id) VALUES (?, ?)",
                (session_id, token_id),
            )
    return f"{session_id}.{secret}"


def csrf_token(secret: str) -> str:
    return hmac.new(secret.encode("ascii"), b"csrf", hashlib.sha256).hexdigest()


def viewer(db: Database, cookie: str | None) -> Viewer | None:
    """The session a cookie names, or ``None`` (missing, malformed, unknown, expired, ended,
    or opened with a token that is now revoked, expired, gone, or of another scope or
    subject)."""
    found = _SESSION.fullmatch(cookie) if cookie and cookie.isascii() else None
    if found is None:
        return None
    session_id, secret = found.groups()
    with db.transaction(write=False) as tx:
        row = tx.one(
            "SELECT s.digest, s.subject, s.role, s.expires_at, b.token_id, t.id, t.revoked_at, "
            "t.expires_at, t.scope, t.subject FROM ui_sessions s "
            "LEFT JOIN ui_session_tokens b ON b.session_id = s.id "
            "LEFT JOIN tokens t ON t.id = b.token_id WHERE s.id = ?",
            (session_id,),
        )
    now = time.time()
    if row is None or not _same(str(row[0]), secret) or now >= float(row[3]):
        return None
    bound, token, revoked_at, token_expires, scope, subject = row[4:10]
    if bound is not None and (
        token is None
        or revoked_at is not None
        or (token_expires is not None and now >= token_expires)
        or (scope, subject) != (row[2], row[1])
    ):
        return None
    return Viewer(session_id, str(row[1]), str(row[2]), csrf_token(secret))


def end_session(db: Database, session_id: str) -> None:
    """End a session now (logout); durable when this returns."""
    with db.transaction() as tx:
        tx.execute("DELETE FROM ui_sessions WHERE id = ?", (session_id,))
        tx.execute("DELETE FROM ui_session_tokens WHERE session_id = ?", (session_id,))


__all__ = [
    "COOKIE",
    "ROLES",
    "Viewer",
    "create_tables",
    "csrf_token",
    "end_session",
    "mint_login",
    "open_session",
    "spend_login",
    "viewer",
]
