"""Owner rows and leases of a fleet: who is alive, who holds what.

:class:`FleetOwner` is one open store's row in ``<schema>.owners``: alive while its heartbeat
keeps ``expires_at`` ahead of the server's clock (only the server's clock is used, so hosts'
clocks may disagree). Leases are rows of ``<schema>.leases`` that expire the same way; exactly
one of many racing callers on any host takes a free lease.

psycopg is imported inside the functions that need it, so importing this module is cheap.
"""

from __future__ import annotations

import contextlib
import os
import socket
from typing import TYPE_CHECKING

from .._errors import StoreFailedError

if TYPE_CHECKING:
    from .connection import PgConnection, PgSession


class OwnerExpired(Exception):
    """This owner's row expired or was removed: another host may recover its sagas."""


class FleetOwner:
    """One open store's owner row, its heartbeats, and the leases taken in its name.

    Args:
        main: the session for registration, liveness checks and leases.
        flusher: the session heartbeats are committed on (synchronously).
        schema: the schema holding ``owners`` and ``leases``.
        ttl: seconds the row stays alive after each heartbeat.
    """

    def __init__(self, main: PgSession, flusher: PgSession, schema: str, ttl: float) -> None:
        from psycopg import sql

        self.id = f"{socket.gethostname()}-{os.getpid()}-{os.urandom(6).hex()}"
        self.ttl = ttl
        self._main, self._flusher = main, flusher
        text = {
            "register": "INSERT INTO {s}.owners (owner_id, host, pid, expires_at)"
            " VALUES (%s, %s, %s, clock_timestamp() + make_interval(secs => %s))",
            "beat": "UPDATE {s}.owners"
            " SET expires_at = clock_timestamp() + make_interval(secs => %s)"
            " WHERE owner_id = %s AND expires_at > clock_timestamp()"
            " RETURNING (SELECT hash FROM {s}.records WHERE seq = %s)",
            "alive": "WITH gone AS (DELETE FROM {s}.owners WHERE owner_id = %(o)s"
            " AND expires_at <= clock_timestamp() RETURNING 1)"
            " SELECT EXISTS (SELECT 1 FROM {s}.owners WHERE owner_id = %(o)s)"
            " AND NOT EXISTS (SELECT 1 FROM gone)",
            "take": "INSERT INTO {s}.leases (name, holder, token, expires_at)"
            " VALUES (%s, %s, %s, clock_timestamp() + make_interval(secs => %s))"
            " ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder,"
            " token = EXCLUDED.token, expires_at = EXCLUDED.expires_at"
            " WHERE leases.expires_at <= clock_timestamp() RETURNING token",
            "give_back": "DELETE FROM {s}.leases WHERE name = %s AND token = %s",
            "drop_leases": "DELETE FROM {s}.leases WHERE holder = %s",
            "drop_owner": "DELETE FROM {s}.owners WHERE owner_id = %s",
        }
        ident = sql.Identifier(schema)
        self._q = {name: sql.SQL(q).format(s=ident) for name, q in text.items()}

    def register(self, conn: PgConnection) -> None:
        """Insert this owner's row, alive for one ttl (committed synchronously)."""
        host, pid = socket.gethostname(), os.getpid()
        conn.execute(self._q["register"], (self.id, host, pid, self.ttl))

    def beat(self, seq: int) -> object:
        """Extend this owner's life with a synchronous commit; returns the hash stored at ``seq``.

        When this returns, the server's WAL is flushed past the heartbeat, and so past every
        transaction that committed before it.

        Raises:
            OwnerExpired: the row had expired or was removed; it is not revived.
            psycopg.Error: the server could not be reached (retried once on a new connection).
        """
        rows = self._flusher.query(self._q["beat"], (self.ttl, self.id, seq))
        if not rows:
            raise OwnerExpired(f"owner {self.id} expired; reopen the store")
        return rows[0][0]

    def alive(self, owner_id: str) -> bool:
        """False when ``owner_id``'s row is missing or expired; an expired row is deleted.

        Deleting is what makes the verdict final: the expired owner's next fenced write fails.
        When the server cannot be read, the owner is reported alive (nothing is proven gone).
        """
        import psycopg

        try:
            rows = self._main.query(self._q["alive"], {"o": owner_id})
        except (psycopg.Error, StoreFailedError):
            return True
        return bool(rows and rows[0][0])

    def take(self, name: str, ttl: float) -> PostgresLease | None:
        """Insert lease ``name`` for ``ttl`` seconds unless a live holder has it.

        ``INSERT ... ON CONFLICT DO UPDATE ... WHERE expired`` makes exactly one of many racing
        callers on any host the holder; the grant is committed synchronously. Not retried: a
        grant whose answer was lost stays held until it expires.

        Raises:
            psycopg.Error: the server could not be reached.
        """
        token = os.urandom(16).hex()
        with self._main.lock:
            conn = self._main.connection()
            row = conn.execute(self._q["take"], (name, self.id, token, ttl)).fetchone()
        return PostgresLease(name, token, self) if row is not None else None

    def give_back(self, name: str, token: str) -> None:
        """Delete the lease if this token still holds it; on any error it ends at its expiry."""
        import psycopg

        with contextlib.suppress(psycopg.Error, StoreFailedError):
            self._main.query(self._q["give_back"], (name, token))

    def retire(self, conn: PgConnection) -> None:
        """Delete this owner's leases and row: every host sees it gone from now on."""
        conn.execute(self._q["drop_leases"], (self.id,))
        conn.execute(self._q["drop_owner"], (self.id,))


class PostgresLease:
    """A lease row; :meth:`release` is idempotent and never raises."""

    def __init__(self, name: str, token: str, owner: FleetOwner) -> None:
        self.name = name
        self._token = token
        self._owner: FleetOwner | None = owner

    def release(self) -> None:
        if self._owner is not None:
            self._owner.give_back(self.name, self._token)
            self._owner = None


__all__ = ["FleetOwner", "OwnerExpired", "PostgresLease"]
