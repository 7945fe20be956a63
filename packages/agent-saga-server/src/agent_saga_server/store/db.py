"""One SQL database for the control plane: embedded SQLite in the home, or PostgreSQL for fleets.

Every piece of state lives here, never in a server process, so any number of processes may
serve one PostgreSQL database at once. Queries are written once with ``?`` placeholders and the
few dialect differences (row locks) go through :meth:`Tx.lock_rows`.

Transactions:

* SQLite: one connection per thread (WAL, ``synchronous=FULL``, a busy timeout); a writing
  transaction starts with ``BEGIN IMMEDIATE``, so writers are serialized across threads and
  processes and every read-check-write inside one is atomic. The writers of one process take
  turns on a lock first, so they wait for each other without polling.
* PostgreSQL: a bounded connection pool (psycopg_pool); transactions run at READ COMMITTED and
  take row locks (``SELECT ... FOR UPDATE``) where a read decides a write. A change other
  replicas must see at once is announced with ``NOTIFY`` (:mod:`.notify`).

When :meth:`Database.transaction` returns normally, the transaction is committed (durably:
``synchronous=FULL`` / PostgreSQL's default ``synchronous_commit``); when it raises, nothing of
it was applied. With ``flush=False`` the commit does not wait for the disk: it is visible and
survives the server process's crash at once, and it is durable against the host's crash once
any later flushed commit to the database has returned (both write-ahead logs are sequential,
and flushing one commit flushes everything committed before it) or SQLite's next checkpoint /
PostgreSQL's WAL writer (within a second) has run. Only for writes a client repeats
idempotently when they are lost (an approval request: see :mod:`.approvals`).
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from .notify import ChangeListener, channel_of
from .schema import POSTGRES_LOCK_ID, statements

Row = tuple[Any, ...]
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


class DatabaseUnavailable(Exception):
    """The database cannot be reached or refused the statement's connection."""


class Tx(Protocol):
    """An open transaction."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None: ...

    def execute_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...

    def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None: ...

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]: ...

    def lock_rows(self) -> str:
        """The clause that locks the rows a ``SELECT`` reads ("" where writers are serialized)."""
        ...

    def notify(self, topic: str) -> None:
        """Tell the other server processes that ``topic`` changed, when this commits."""
        ...


class Database(Protocol):
    """Where the control plane keeps its state."""

    kind: str
    where: str

    def transaction(self, *, write: bool = True, wait: float = 30.0, flush: bool = True) -> Any:
        """A transaction (see the module docstring); ``wait`` is the longest to wait for a
        connection before :class:`DatabaseUnavailable`; ``flush=False``: a commit that does not
        wait for the disk (see the module docstring)."""
        ...

    def listen(self, on_change: Callable[[str], None]) -> Callable[[], None]:
        """Call ``on_change(topic)`` (from another thread) when another process changes a
        topic; returns the function that stops listening."""
        ...

    def close(self) -> None: ...


class _SqliteTx:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        self.conn.execute(sql, tuple(params))

    def execute_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self.conn.executemany(sql, [tuple(row) for row in rows])

    def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        row: Row | None = self.conn.execute(sql, tuple(params)).fetchone()
        return row

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return list(self.conn.execute(sql, tuple(params)).fetchall())

    def lock_rows(self) -> str:
        return ""

    def notify(self, topic: str) -> None:
        """Nothing: one server process serves a SQLite database, and it wakes its own waiters."""


class SqliteDatabase:
    """The zero-configuration database: one SQLite file (WAL mode, fsync on every commit)."""

    kind = "sqlite"

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.where = str(path)
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._writer = threading.RLock()  # a nested writer fails in SQLite, never deadlocks here
        with self.transaction() as tx:
            for statement in statements("sqlite"):
                tx.execute(statement)

    def _connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA busy_timeout=30000")
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    @contextmanager
    def transaction(
        self, *, write: bool = True, wait: float = 30.0, flush: bool = True
    ) -> Iterator[Tx]:
        if not write:
            with self._open(write=False) as tx:
                yield tx
            return
        # writers of this process queue here, woken as soon as the one before commits;
        # SQLite's own busy handler would make them sleep and retry (1 ms to 100 ms at a time)
        with self._writer, self._open(write=True, flush=flush) as tx:
            yield tx

    @contextmanager
    def _open(self, *, write: bool, flush: bool = True) -> Iterator[Tx]:
        conn = self._connection()
        if not flush:  # WAL mode: NORMAL syncs the log at checkpoints only (per connection)
            conn.execute("PRAGMA synchronous=NORMAL")
        try:
            try:
                conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            except sqlite3.Error as exc:
                raise DatabaseUnavailable(f"{self.where}: {exc}") from exc
            try:
                yield _SqliteTx(conn)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        finally:
            if not flush:  # a COMMIT that failed may leave the transaction open
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                conn.execute("PRAGMA synchronous=FULL")

    def listen(self, on_change: Callable[[str], None]) -> Callable[[], None]:
        """Nothing to listen to (see :meth:`_SqliteTx.notify`)."""
        return lambda: None

    def close(self) -> None:
        with self._lock:
            for conn in self._all:
                conn.close()
            self._all.clear()


class _PgTx:
    def __init__(self, conn: Any, channel: str) -> None:
        self.conn = conn
        self.channel = channel

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        self.conn.execute(_pg(sql), tuple(params))

    def execute_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            with self.conn.cursor() as cursor:
                cursor.executemany(_pg(sql), [tuple(row) for row in rows])

    def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        row: Row | None = self.conn.execute(_pg(sql), tuple(params)).fetchone()
        return row

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return list(self.conn.execute(_pg(sql), tuple(params)).fetchall())

    def lock_rows(self) -> str:
        return " FOR UPDATE"

    def notify(self, topic: str) -> None:
        self.conn.execute("SELECT pg_notify(%s, %s)", (self.channel, topic))


def _pg(sql: str) -> str:
    return sql.replace("?", "%s")


class PostgresDatabase:
    """A PostgreSQL database shared by every server replica; tables in schema ``schema``."""

    kind = "postgres"

    def __init__(self, url: str, *, schema: str = "agent_saga_server", pool_size: int = 8) -> None:
        if not _SCHEMA_NAME.fullmatch(schema):
            raise ValueError(f"schema must be a lowercase identifier, got {schema!r}")
        try:
            import psycopg
            from psycopg_pool import ConnectionPool
        except ImportError as exc:  # pragma: no cover - the extra is part of the dev install
            raise DatabaseUnavailable(
                "PostgreSQL needs the extra: pip install 'agent-saga-server[postgres]'"
            ) from exc
        self.schema = schema
        self.channel = channel_of(schema)
        self.where = _display(url) + f" schema {schema}"
        self._url = url
        self._psycopg = psycopg

        def configure(conn: Any) -> None:
            conn.execute(f"SET search_path TO {schema}")
            conn.commit()

        try:
            with psycopg.connect(url, connect_timeout=10) as conn, conn.transaction():
                # CREATE SCHEMA IF NOT EXISTS races with itself: replicas starting together
                # take turns (the lock ends with the transaction)
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (POSTGRES_LOCK_ID,))
                conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        except psycopg.Error as exc:
            raise DatabaseUnavailable(f"{self.where}: {_one_line(exc)}") from exc
        self._pool = ConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            configure=configure,
            kwargs={"connect_timeout": 10},
            open=True,
        )
        with self.transaction() as tx:
            tx.execute("SELECT pg_advisory_xact_lock(?)", (POSTGRES_LOCK_ID,))
            for statement in statements("postgres"):
                tx.execute(statement)

    @contextmanager
    def transaction(
        self, *, write: bool = True, wait: float = 30.0, flush: bool = True
    ) -> Iterator[Tx]:
        try:
            with self._pool.connection(timeout=wait) as conn, conn.transaction():
                if not flush:  # this transaction only
                    conn.execute("SET LOCAL synchronous_commit TO off")
                yield _PgTx(conn, self.channel)
        except self._psycopg.OperationalError as exc:  # includes the pool's timeout
            raise DatabaseUnavailable(f"{self.where}: {_one_line(exc)}") from exc

    def listen(self, on_change: Callable[[str], None]) -> Callable[[], None]:
        listener = ChangeListener(self._url, self.channel, on_change)
        listener.start()
        return listener.stop

    def close(self) -> None:
        self._pool.close()


def _display(url: str) -> str:
    return re.sub(r"://([^:@/]*):[^@/]*@", r"://\1:***@", url)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__


def open_database(store: str | None, home: Path, *, schema: str = "agent_saga_server") -> Database:
    """The database ``store`` names: a ``postgresql://`` URL, or SQLite in ``home``.

    Raises:
        DatabaseUnavailable: PostgreSQL cannot be reached (the message names the server).
        ValueError: a store that is neither.
    """
    if store is None or store in ("sqlite", ""):
        return SqliteDatabase(home / "control-plane.sqlite3")
    if store.startswith(("postgresql://", "postgres://")):
        return PostgresDatabase(store, schema=schema)
    if store.startswith("sqlite:///"):
        return SqliteDatabase(Path(store.removeprefix("sqlite:///")))
    raise ValueError(f"--store must be a postgresql:// URL or sqlite:///PATH, got {store!r}")


__all__ = [
    "Database",
    "DatabaseUnavailable",
    "PostgresDatabase",
    "Row",
    "SqliteDatabase",
    "Tx",
    "open_database",
]


def create_missing_tables(db: Database, statements: Sequence[str]) -> None:
    """Run idempotent ``CREATE ... IF NOT EXISTS`` statements in one transaction. On PostgreSQL
    replicas starting together take turns (such statements race with themselves there)."""
    with db.transaction() as tx:
        if db.kind == "postgres":
            tx.execute("SELECT pg_advisory_xact_lock(?)", (POSTGRES_LOCK_ID,))
        for statement in statements:
            tx.execute(statement)
