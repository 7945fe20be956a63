"""Fleet-mode plumbing on PostgreSQL: connections, the schema, owner rows and leases.

* Every connection is in autocommit mode with ``synchronous_commit = on``: a statement that
  writes returns only once the server has flushed its WAL past that write.
* :class:`PgSession` keeps one connection, replaces it when it is found broken, and retries an
  idempotent statement once on the new connection.
* :func:`ensure_schema` creates the schema's tables when any is missing, under an advisory lock
  so that processes starting together do not race.
* :class:`FleetOwner` is one open store's row in ``<schema>.owners``: alive while its heartbeat
  keeps ``expires_at`` ahead of the server's clock (only the server's clock is used, so hosts'
  clocks may disagree). Leases are rows of ``<schema>.leases`` that expire the same way.

psycopg is imported inside the functions that need it, so importing this module is cheap.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from .._errors import ConfigurationError, StoreFailedError
from .._log.forks import ForkGuard

if TYPE_CHECKING:
    from psycopg import Connection
    from psycopg.abc import Params
    from psycopg.rows import TupleRow
    from psycopg.sql import Composed

    PgConnection = Connection[TupleRow]

DEFAULT_SCHEMA = "agent_saga"
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")

_DDL = """
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.records (
    seq bigint PRIMARY KEY CHECK (seq > 0),
    hash text NOT NULL,
    line bytea NOT NULL
);
CREATE TABLE IF NOT EXISTS {s}.owners (
    owner_id text PRIMARY KEY,
    host text NOT NULL,
    pid integer NOT NULL,
    opened_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    expires_at timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS {s}.leases (
    name text PRIMARY KEY,
    holder text NOT NULL,
    token text NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS {s}.kill_switch (
    id smallint PRIMARY KEY CHECK (id = 1),
    halted boolean NOT NULL,
    reason text NOT NULL,
    since double precision,
    changed_at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""
_TABLES = ["records", "owners", "leases", "kill_switch"]


def require_psycopg() -> None:
    """Raise :class:`ConfigurationError` when psycopg 3 cannot be imported."""
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        raise ConfigurationError(
            "PostgreSQL stores need psycopg 3: pip install 'agent-saga[postgres]'"
        ) from exc


def check_schema_name(schema: str) -> str:
    """``schema`` if it is a plain lower-case identifier (it names tables in SQL)."""
    if not _SCHEMA_NAME.fullmatch(schema):
        raise ConfigurationError(f"schema must match {_SCHEMA_NAME.pattern}, got {schema!r}")
    return schema


def lock_key(schema: str, purpose: str) -> int:
    """A stable 64-bit advisory-lock key for ``purpose`` in ``schema``."""
    digest = hashlib.sha256(f"agent-saga:{schema}:{purpose}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def display_url(url: str) -> str:
    """``url`` without its password, for messages and manifests; never raises."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        info = conninfo_to_dict(url)
    except Exception:
        return "<unparsable PostgreSQL URL>"
    user = f"{info['user']}@" if info.get("user") else ""
    port = f":{info['port']}" if info.get("port") else ""
    return f"postgresql://{user}{info.get('host', '')}{port}/{info.get('dbname', '')}"


def one_line(exc: BaseException) -> str:
    """An error message on one line (libpq's span several)."""
    return " ".join(str(exc).split())


def ensure_schema(conn: PgConnection, schema: str) -> None:
    """Create the schema's tables if any is missing (idempotent; safe to race)."""
    from psycopg import sql

    present = conn.execute(
        "SELECT count(*) FROM pg_tables WHERE schemaname = %s AND tablename = ANY(%s)",
        (schema, _TABLES),
    ).fetchone()
    if present is not None and present[0] == len(_TABLES):
        return
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key(schema, "ddl"),))
        for statement in _DDL.split(";"):
            conn.execute(sql.SQL(statement.strip()).format(s=sql.Identifier(schema)))


class PgSession:
    """One kept connection, opened on first use and replaced when found broken.

    Args:
        url: a libpq connection URL or ``key=value`` string.
        timeout: seconds to wait for a connection.
        setup: run on each new connection before it is used.
    """

    def __init__(
        self, url: str, timeout: float, setup: Callable[[PgConnection], None] | None = None
    ) -> None:
        self.url, self.timeout = url, timeout
        self.lock = threading.Lock()
        """Held by whoever uses :meth:`connection`; :meth:`query` takes it itself."""
        self._setup = setup
        self._conn: PgConnection | None = None
        self._closed = False
        self._process = ForkGuard("a PostgreSQL session")

    def _adopt_after_fork(self) -> None:
        """In a process forked after the connection was made, start afresh: the parent's
        socket is never used (two processes on one session corrupt it) nor closed (that would
        end the parent's session), and a lock a parent thread held at the fork is replaced."""
        if self._process.inherited:
            self.lock = threading.Lock()
            self._conn = None
            self._process = ForkGuard("a PostgreSQL session")

    def connection(self) -> PgConnection:
        """The live connection (hold :attr:`lock`), opened or replaced as needed.

        Raises:
            StoreFailedError: the session is closed.
            psycopg.Error: no connection could be made.
        """
        import psycopg

        self._adopt_after_fork()
        if self._closed:
            raise StoreFailedError(f"{display_url(self.url)}: connection closed")
        conn = self._conn
        if conn is not None and not conn.closed and not conn.broken:
            return conn
        if conn is not None:
            conn.close()
        self._conn = None
        conn = psycopg.connect(
            self.url,
            autocommit=True,
            connect_timeout=max(2, round(self.timeout)),
            application_name="agent-saga",
        )
        try:
            conn.execute("SET synchronous_commit = on")
            if self._setup is not None:
                self._setup(conn)
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    def query(self, query: str | Composed, params: Params = ()) -> list[TupleRow]:
        """Run an idempotent statement; if the connection broke, run it once more on a new one."""
        import psycopg

        self._adopt_after_fork()
        with self.lock:
            for attempt in (1, 2):
                conn = self.connection()
                try:
                    cursor = conn.execute(query, params)
                    return cursor.fetchall() if cursor.description else []
                except psycopg.OperationalError:
                    if attempt == 2 or not conn.broken:
                        raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Close the connection; later uses raise :class:`StoreFailedError`. Idempotent."""
        self._adopt_after_fork()
        with self.lock:
            self._closed = True
            if self._conn is not None:
                self._conn.close()
                self._conn = None


_DURABLE_COMMIT = frozenset({"on", "remote_write", "remote_apply", "local"})


def server_settings(main: PgSession, flusher: PgSession) -> dict[str, str]:
    """The server's durability settings, read now (``flusher``'s commit mode as it is in force)."""
    row = main.query(
        "SELECT current_setting('server_version'), current_setting('fsync'),"
        " current_setting('full_page_writes'),"
        " (SELECT reset_val FROM pg_settings WHERE name = 'synchronous_commit'),"
        " current_setting('synchronous_standby_names')"
    )[0]
    effective = flusher.query("SHOW synchronous_commit")[0]
    return {
        "server_version": str(row[0]),
        "fsync": str(row[1]),
        "full_page_writes": str(row[2]),
        "server_synchronous_commit": str(row[3]),
        "flush_synchronous_commit": str(effective[0]),
        "synchronous_standby_names": str(row[4]),
    }


def durability_problems(settings: dict[str, str]) -> list[str]:
    """Why a commit acknowledged under ``settings`` might not survive a crash (empty if none)."""
    problems = []
    if settings["fsync"] != "on":
        problems.append("server has fsync=off: committed records may be lost in a crash")
    if settings["full_page_writes"] != "on":
        problems.append("server has full_page_writes=off: a power loss may tear pages")
    if settings["flush_synchronous_commit"] not in _DURABLE_COMMIT:
        commit = settings["flush_synchronous_commit"]
        problems.append(f"flushes commit with synchronous_commit={commit}")
    return problems


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


__all__ = [
    "DEFAULT_SCHEMA",
    "FleetOwner",
    "OwnerExpired",
    "PgSession",
    "PostgresLease",
    "check_schema_name",
    "display_url",
    "durability_problems",
    "ensure_schema",
    "lock_key",
    "one_line",
    "require_psycopg",
    "server_settings",
]
