"""What the fleet-mode PostgreSQL store and kill switch share: connections and the schema.

* Every connection is in autocommit mode with ``synchronous_commit = on``: a statement that
  writes returns only once the server has flushed its WAL past that write.
* :class:`PgSession` keeps one connection, replaces it when it is found broken, and retries an
  idempotent statement once on the new connection.
* :func:`ensure_schema` creates the schema's tables when any is missing, under an advisory lock
  so that processes starting together do not race.

psycopg is imported inside the functions that need it, so importing this module is cheap.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ._errors import ConfigurationError, StoreFailedError

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
            "PostgreSQL stores need psycopg 3: pip install 'agent-saga-core[postgres]'"
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

    def connection(self) -> PgConnection:
        """The live connection (hold :attr:`lock`), opened or replaced as needed.

        Raises:
            StoreFailedError: the session is closed.
            psycopg.Error: no connection could be made.
        """
        import psycopg

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
        with self.lock:
            self._closed = True
            if self._conn is not None:
                self._conn.close()
                self._conn = None


__all__ = [
    "DEFAULT_SCHEMA",
    "PgSession",
    "check_schema_name",
    "display_url",
    "ensure_schema",
    "lock_key",
    "one_line",
    "require_psycopg",
]
