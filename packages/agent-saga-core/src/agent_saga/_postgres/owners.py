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
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeAlias

from .._errors import LeaseLostError, StoreFailedError
from .._log.records import Entry, Record

if TYPE_CHECKING:
    from psycopg.sql import Composed

    from .connection import PgConnection, PgSession

LEASE_LOST = "lease lost: "
"""How the fence's failure message starts (the lease's name follows)."""
FencedAppend: TypeAlias = "Callable[[Sequence[Entry], bool, Composed], list[Record]]"


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
            "renew": "UPDATE {s}.leases"
            " SET expires_at = clock_timestamp() + make_interval(secs => %s)"
            " WHERE name = %s AND token = %s AND expires_at > clock_timestamp() RETURNING 1",
            "drop_leases": "DELETE FROM {s}.leases WHERE holder = %s",
            "drop_owner": "DELETE FROM {s}.owners WHERE owner_id = %s",
        }
        ident = sql.Identifier(schema)
        self._ident = ident
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
        # within a third of the ttl: a batch waiting long for the log's lock on a shared session
        rows = self._flusher.query_soon(self._q["beat"], (self.ttl, self.id, seq), self.ttl / 3)
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

    def take(self, name: str, ttl: float) -> str | None:
        """Insert lease ``name`` for ``ttl`` seconds unless a live holder has it; its token.

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
        return token if row is not None else None

    def renew(self, name: str, token: str, ttl: float) -> bool:
        """Extend lease ``name`` to ``ttl`` seconds from now if ``token`` still holds it alive.

        An expired lease is not revived, even when nobody took it since: its holder may have
        been declared gone. False also when the server cannot be read.
        """
        import psycopg

        try:
            return bool(self._main.query(self._q["renew"], (ttl, name, token)))
        except (psycopg.Error, StoreFailedError):
            return False

    def fence(self, name: str, token: str) -> Composed:
        """A statement that aborts its transaction unless ``token`` holds lease ``name`` alive.

        It share-locks the lease row, so the lease cannot be taken over (an update of the row)
        before the transaction ends: a record written with it commits before any later holder
        is granted the lease, and so before that holder re-reads the log.
        """
        from psycopg import sql

        return sql.SQL(
            "SELECT {s}.agent_saga_expect(EXISTS (SELECT 1 FROM {s}.leases WHERE name = {n}"
            " AND token = {t} AND expires_at > clock_timestamp() FOR SHARE), {why})"
        ).format(
            s=self._ident,
            n=sql.Literal(name),
            t=sql.Literal(token),
            why=sql.Literal(LEASE_LOST + name),
        )

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
    """A lease row, renewed by its holder and fencing the records written through it.

    Args:
        name: the lease's name.
        token: this grant's token (a later grant of the same name has another).
        owner: the owner that took it.
        write: the store's fenced append, ``write(entries, sync, fence)``.
    """

    def __init__(self, name: str, token: str, owner: FleetOwner, write: FencedAppend) -> None:
        self.name = name
        self._token = token
        self._owner: FleetOwner | None = owner
        self._write = write
        self._fence = owner.fence(name, token)

    def release(self) -> None:
        """Give the lease back; idempotent and never raises (on an error it ends at expiry)."""
        if self._owner is not None:
            self._owner.give_back(self.name, self._token)
            self._owner = None

    def renew(self, ttl: float) -> bool:
        """Extend the lease to ``ttl`` seconds from now (server clock); False once it is lost."""
        if self._owner is None:
            return False
        return self._owner.renew(self.name, self._token, ttl)

    def append(self, entries: Sequence[Entry], *, sync: bool) -> list[Record]:
        """Append in a transaction that checks this grant still holds the lease.

        Raises:
            LeaseLostError: the lease was released, expired or taken over; nothing was written.
            StoreFailedError: as the store's ``append``.
        """
        if self._owner is None:
            raise LeaseLostError(f"lease {self.name!r} was released; nothing was written")
        return self._write(entries, sync, self._fence)


__all__ = ["LEASE_LOST", "FleetOwner", "OwnerExpired", "PostgresLease"]
