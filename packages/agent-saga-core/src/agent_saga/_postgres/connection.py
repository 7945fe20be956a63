"""PostgreSQL connections for fleet mode, and the server's durability settings.

* Every connection is in autocommit mode with ``synchronous_commit = on``: a statement that
  writes returns only once the server has flushed its WAL past that write.
* :class:`PgSession` keeps one connection, replaces it when it is found broken, and retries an
  idempotent statement once on the new connection.
* :func:`server_settings` and :func:`durability_problems` say whether a commit acknowledged by
  this server survives a crash.

psycopg is imported inside the functions that need it, so importing this module is cheap.
"""

from __future__ import annotations

import hashlib
import re
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
    """An error message on one line (libpq's span several); the exception's class name when
    it says nothing (a ``KeyboardInterrupt``)."""
    return " ".join(str(exc).split()) or type(exc).__name__


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

    def discard(self) -> None:
        """Close the connection now (a new one is opened on next use): the server rolls back
        whatever transaction it had open and releases its locks. For a batch interrupted
        between two of its round trips, whose transaction would otherwise stay open holding
        the log's lock for every process."""
        self._adopt_after_fork()
        with self.lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def query(self, query: str | Composed, params: Params = ()) -> list[TupleRow]:
        """Run an idempotent statement; if the connection broke, run it once more on a new one."""
        self._adopt_after_fork()
        with self.lock:
            return self._query(query, params)

    def query_soon(
        self, query: str | Composed, params: Params = (), within: float = 1.0
    ) -> list[TupleRow]:
        """:meth:`query`, or, when the session stays busy for ``within`` seconds (a batch
        waiting for the log's lock holds it), the same on a connection opened for it alone and
        closed after it (a heartbeat must not wait for another process's batch)."""
        import psycopg

        self._adopt_after_fork()
        if self.lock.acquire(timeout=within):
            try:
                return self._query(query, params)
            finally:
                self.lock.release()
        if self._closed:
            raise StoreFailedError(f"{display_url(self.url)}: connection closed")
        timeout = max(2, round(self.timeout))
        with psycopg.connect(
            self.url, autocommit=True, connect_timeout=timeout, application_name="agent-saga"
        ) as conn:
            conn.execute("SET synchronous_commit = on")
            cursor = conn.execute(query, params)
            return cursor.fetchall() if cursor.description else []

    def _query(self, query: str | Composed, params: Params) -> list[TupleRow]:
        """:meth:`query` with :attr:`lock` held."""
        import psycopg

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


__all__ = [
    "DEFAULT_SCHEMA",
    "PgSession",
    "check_schema_name",
    "display_url",
    "durability_problems",
    "lock_key",
    "one_line",
    "require_psycopg",
    "server_settings",
]
