"""Who may register a passkey: an admin's one-time enrolment code, or an existing passkey.

A dashboard session (even one opened with a pasted approver token) may not add a passkey on
its own: a passkey's votes are what ``require_passkey`` counts, so a stolen token must not be
enough to make one. Registering needs a *grant*, checked before the browser makes the
credential and again in the transaction that stores it:

* **An enrolment code** ``ase_<id>_<secret>``, issued by an admin (``POST
  /v1/passkeys/enrolments``, ``agent-saga cloud-server passkeys enrol SUBJECT``) for one
  subject. Its text is shown once; only ``SHA-256(secret)`` is stored and it is compared with
  :func:`hmac.compare_digest`. It expires (15 minutes unless the admin says otherwise), it is
  spent by the first registration that stores a passkey (a registration that fails does not
  spend it), and after :data:`MAX_FAILURES` wrong tries against it (a wrong secret, or a
  session of another subject) it is dead. The code is the only way to a subject's *first*
  passkey.
* **An assertion by one of the subject's passkeys** (a challenge of purpose ``enrol``: one-time,
  five minutes, bound to the session's subject; :func:`.passkeys.enrol_options`), for another
  passkey of a subject that has one already.

The grant travels with the registration challenge (``grant`` here: ``code:<id>`` or
``passkey:<credential id>``), and :func:`spend_grant` re-checks it where the passkey is stored.
An admin lists a subject's passkeys and revokes one (:func:`revoke_passkey`); a revoked passkey
no longer verifies any vote on this control plane.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass

from ..store.db import Database, Tx, create_missing_tables
from ..store.tokens import NAME

ENROL_TTL = 900.0
"""Seconds an enrolment code is valid unless its admin says otherwise."""
MAX_FAILURES = 5
"""Wrong tries against one code (wrong secret, other subject) after which it is dead."""
_CODE = re.compile(r"ase_([0-9a-f]{16})_([A-Za-z0-9_-]{43})")
TABLES = (
    "CREATE TABLE IF NOT EXISTS ui_enrolments (id TEXT PRIMARY KEY, digest TEXT NOT NULL, "
    "subject TEXT NOT NULL, created_by TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL, "
    "expires_at DOUBLE PRECISION NOT NULL, failures INTEGER NOT NULL, "
    "used_at DOUBLE PRECISION, credential_id TEXT)",
)


class EnrolmentRefused(Exception):
    """A code or grant that does not allow this registration (the message says why)."""


@dataclass(frozen=True)
class EnrolmentCode:
    """A code as issued: its text (shown once, never stored), id, subject and expiry."""

    code: str
    id: str
    subject: str
    expires_at: float


@dataclass(frozen=True)
class StoredPasskey:
    """A registered passkey as an admin lists it."""

    credential_id: str
    subject: str
    created_at: float
    sign_count: int


def create_tables(db: Database) -> None:
    create_missing_tables(db, TABLES)


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("ascii")).hexdigest()


def issue_code(tx: Tx, subject: str, created_by: str, ttl: float = ENROL_TTL) -> EnrolmentCode:
    """A new enrolment code for ``subject``, written in ``tx`` (durable when it commits).

    Raises:
        ValueError: a subject no token (so no session) can have, or a lifetime that is not
            positive.
    """
    if not NAME.fullmatch(subject):
        shown = repr(subject[:80])
        raise ValueError(f"an enrolment code's subject must match {NAME.pattern}, got {shown}")
    if not ttl > 0:
        raise ValueError(f"an enrolment code's lifetime must be positive, got {ttl}")
    code_id, secret = secrets.token_hex(8), secrets.token_urlsafe(32)
    now = time.time()
    tx.execute(
        "INSERT INTO ui_enrolments (id, digest, subject, created_by, created_at, expires_at, "
        "failures) VALUES (?, ?, ?, ?, ?, ?, 0)",
        (code_id, _digest(secret), subject, created_by, now, now + ttl),
    )
    return EnrolmentCode(f"ase_{code_id}_{secret}", code_id, subject, now + ttl)


def check_code(db: Database, presented: str, subject: str) -> str:
    """The id of a code that ``subject`` may register a passkey with now (not spent here).

    A wrong secret or another subject's session counts as a failure against the code (committed
    before this raises); the code is dead after :data:`MAX_FAILURES` of them.

    Raises:
        EnrolmentRefused: malformed, unknown, wrong, another subject's, expired, spent or dead.
    """
    found = _CODE.fullmatch(presented.strip()) if presented.isascii() else None
    if found is None:
        raise EnrolmentRefused("that is not an enrolment code (ase_...)")
    code_id, secret = found.groups()
    with db.transaction() as tx:
        row = tx.one(
            "SELECT digest, subject, expires_at, failures, used_at FROM ui_enrolments "  # noqa: S608
            "WHERE id = ?" + tx.lock_rows(),
            (code_id,),
        )
        if row is None:
            raise EnrolmentRefused("unknown enrolment code")
        digest, owner, expires_at, failures, used_at = row
        right = hmac.compare_digest(bytes.fromhex(str(digest)), bytes.fromhex(_digest(secret)))
        problem = _problem(right, str(owner) == subject, float(expires_at), used_at, failures)
        if problem is not None and problem.counts:
            tx.execute("UPDATE ui_enrolments SET failures = failures + 1 WHERE id = ?", (code_id,))
    if problem is not None:
        raise EnrolmentRefused(problem.text)
    return code_id


@dataclass(frozen=True)
class _Problem:
    text: str
    counts: bool
    """Whether it is a wrong try (counted against the code)."""


def _problem(
    right: bool, own: bool, expires_at: float, used_at: object, failures: object
) -> _Problem | None:
    if int(str(failures)) >= MAX_FAILURES:
        return _Problem("this enrolment code had too many wrong tries; ask for a new one", False)
    if not right:
        return _Problem("wrong enrolment code", True)
    if not own:
        return _Problem("this enrolment code was issued for another subject", True)
    if used_at is not None:
        return _Problem("this enrolment code was already used; ask for a new one", False)
    if time.time() >= expires_at:
        return _Problem("this enrolment code has expired; ask for a new one", False)
    return None


def spend_grant(tx: Tx, grant: str | None, subject: str, credential_id: str) -> None:
    """Spend what allowed this registration, in the transaction that stores the passkey.

    ``code:<id>``: the code must still be ``subject``'s, unspent and unexpired; it is marked
    spent (by ``credential_id``). ``passkey:<id>``: that passkey must still be ``subject``'s
    (not revoked meanwhile).

    Raises:
        EnrolmentRefused: no grant, or one that no longer holds (``tx`` should roll back).
    """
    kind, _, ident = (grant or "").partition(":")
    if kind == "code":
        row = tx.one(
            "SELECT subject, expires_at, used_at FROM ui_enrolments WHERE id = ?"  # noqa: S608
            + tx.lock_rows(),
            (ident,),
        )
        if row is None or str(row[0]) != subject or row[2] is not None:
            raise EnrolmentRefused("the enrolment code was used meanwhile; ask for a new one")
        if time.time() >= float(row[1]):
            raise EnrolmentRefused("the enrolment code has expired; ask for a new one")
        tx.execute(
            "UPDATE ui_enrolments SET used_at = ?, credential_id = ? WHERE id = ?",
            (time.time(), credential_id, ident),
        )
        return
    if kind == "passkey":
        held = tx.one(
            "SELECT subject FROM ui_passkeys WHERE credential_id = ?" + tx.lock_rows(),  # noqa: S608
            (ident,),
        )
        if held is not None and str(held[0]) == subject:
            return
        raise EnrolmentRefused("the passkey that allowed this registration was revoked")
    raise EnrolmentRefused("registering a passkey needs an enrolment code or an existing passkey")


def list_passkeys(db: Database, subject: str | None = None) -> list[StoredPasskey]:
    """Registered passkeys (of ``subject``, or all), oldest first."""
    sql = "SELECT credential_id, subject, created_at, sign_count FROM ui_passkeys"
    params: tuple[str, ...] = ()
    if subject is not None:
        sql, params = sql + " WHERE subject = ?", (subject,)
    with db.transaction(write=False) as tx:
        rows = tx.all(sql + " ORDER BY created_at, credential_id", params)
    return [StoredPasskey(str(c), str(s), float(t), int(n)) for c, s, t, n in rows]


def revoke_passkey(tx: Tx, credential_id: str) -> str | None:
    """Remove a passkey in ``tx``; its subject, or ``None`` when there is no such passkey.
    Once committed, no vote or enrolment assertion by it verifies."""
    row = tx.one("SELECT subject FROM ui_passkeys WHERE credential_id = ?", (credential_id,))
    if row is None:
        return None
    tx.execute("DELETE FROM ui_passkeys WHERE credential_id = ?", (credential_id,))
    return str(row[0])


__all__ = [
    "ENROL_TTL",
    "MAX_FAILURES",
    "EnrolmentCode",
    "EnrolmentRefused",
    "StoredPasskey",
    "check_code",
    "create_tables",
    "issue_code",
    "list_passkeys",
    "revoke_passkey",
    "spend_grant",
]
