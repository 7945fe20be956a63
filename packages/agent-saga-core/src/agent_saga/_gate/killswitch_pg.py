"""The fleet-mode kill switch: one row in a PostgreSQL schema, read before every effect.

Reading is fail-closed: when the row cannot be read (no server, refused login, a bad URL, a
query error), the answer is "halted" with ``readable=False``. The switch keeps one connection so
a read costs one round trip; a broken connection is replaced and the read retried once.
``halt`` and ``resume`` return once their change is committed with ``synchronous_commit = on``,
and notify the switch's channel in the same transaction. A watching switch (``watch=True``) keeps
the row in memory, re-read on every notification (``killswitch_watch``): a halt is seen by every
process within milliseconds of its commit, not when a thread next reads the row (and a check
reads memory: an effect checked in those milliseconds still runs, so it is asked for).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from .._errors import StoreFailedError
from .._postgres.connection import (
    DEFAULT_SCHEMA,
    PgSession,
    check_schema_name,
    display_url,
    one_line,
    require_psycopg,
)
from .._postgres.schema import ensure_schema
from .killswitch import HaltState
from .killswitch_watch import REFRESH, HaltWatch

if TYPE_CHECKING:
    from psycopg.sql import Composed

    from .._postgres.connection import PgConnection
    from .._postgres.store import PostgresLogStore

_NOT_HALTED = HaltState(halted=False)


class PostgresKillSwitch:
    """Halted while ``<schema>.kill_switch`` holds a row with ``halted`` true.

    Connecting is deferred to the first call, so an unreachable server shows up as an
    unreadable (halted) state rather than as an error at construction.

    Args:
        url: a libpq connection URL or ``key=value`` string.
        schema: the PostgreSQL schema shared with the fleet's :class:`PostgresLogStore`.
        timeout: seconds to wait for a connection, and for a statement.
        watch: keep the row in memory, told of changes by NOTIFY (one more connection, opened
            with the first read): every process knows of a halt milliseconds after its commit
            and a check costs no round trip, but an effect checked within those milliseconds
            still runs. Without it (the default) every check reads the row: exact, one round
            trip.

    Raises:
        ConfigurationError: psycopg is missing, or ``schema`` is not a plain identifier.
    """

    @classmethod
    def beside(cls, store: PostgresLogStore, *, watch: bool = False) -> PostgresKillSwitch:
        """The fleet's kill switch: a row in ``store``'s schema on the same server."""
        return cls(store.url, schema=store.schema, timeout=store.connect_timeout, watch=watch)

    def __init__(
        self,
        url: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        timeout: float = 5.0,
        watch: bool = False,
    ) -> None:
        require_psycopg()
        from psycopg import sql

        self.schema = check_schema_name(schema)
        self._timeout = timeout
        self.where = f"{display_url(url)} schema {schema}"
        table = sql.Identifier(schema, "kill_switch")
        self._read_q: Composed = sql.SQL(
            "SELECT halted, reason, since FROM {t} WHERE id = 1"
        ).format(t=table)
        self._channel = f"{schema}.halt"[:63]
        notify = sql.SQL(" SELECT pg_notify({c}, 'changed') FROM changed").format(
            c=sql.Literal(self._channel)
        )
        self._halt_q: Composed = (
            sql.SQL(
                "WITH changed AS (INSERT INTO {t} (id, halted, reason, since)"
                " VALUES (1, true, %s, %s)"
                " ON CONFLICT (id) DO UPDATE SET halted = true, reason = EXCLUDED.reason,"
                " since = EXCLUDED.since, changed_at = clock_timestamp() RETURNING 1)"
            ).format(t=table)
            + notify
        )
        self._resume_q: Composed = (
            sql.SQL(
                "WITH changed AS (UPDATE {t} SET halted = false, reason = '', since = NULL,"
                " changed_at = clock_timestamp() WHERE id = 1 AND halted RETURNING 1)"
            ).format(t=table)
            + notify
        )
        self._url = url
        self._session = PgSession(url, timeout, setup=self._setup)
        self._watching = watch
        self._watch: HaltWatch | None = None
        self._watch_lock = threading.Lock()
        self._closed = False

    def _setup(self, conn: PgConnection) -> None:
        timeout_ms = str(int(self._timeout * 1000))
        conn.execute("SELECT set_config('statement_timeout', %s, false)", (timeout_ms,))
        ensure_schema(conn, self.schema)

    def state(self) -> HaltState:
        """The switch now: the watched row when fresh, else read; unreadable counts as halted."""
        if self._watching:
            watched = self._watched()
            if watched is not None:
                return watched
        try:
            rows = self._session.query(self._read_q)
        except Exception as exc:
            reason = f"kill switch unreadable: {self.where}: {one_line(exc)}"
            return HaltState(True, reason, readable=False)
        return _state_of(rows)

    def _watched(self) -> HaltState | None:
        watch = self._watch
        if watch is None:
            with self._watch_lock:
                if self._watch is None and not self._closed:
                    self._watch = HaltWatch(self._connect, self._channel, self._read_on)
                watch = self._watch
        return watch.current() if watch is not None else None

    def _connect(self) -> PgConnection:
        import psycopg

        conn = psycopg.connect(
            self._url,
            autocommit=True,
            connect_timeout=max(2, round(self._timeout)),
            application_name="agent-saga-halt",
        )
        try:
            self._setup(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _read_on(self, conn: PgConnection) -> HaltState:
        return _state_of(conn.execute(self._read_q).fetchall())

    def halt(self, reason: str, *, at: float) -> None:
        """Engage the switch for every host reading this schema; durable when this returns.

        Raises:
            ConnectionError: the row could not be written (the switch may not be engaged).
        """
        self._write(self._halt_q, (reason, at), "halt")

    def resume(self) -> None:
        """Release the switch; durable when this returns. Idempotent.

        Raises:
            ConnectionError: the row could not be written (the switch may still be engaged).
        """
        self._write(self._resume_q, (), "resume")

    def _write(self, query: Composed, params: tuple[object, ...], what: str) -> None:
        import psycopg

        try:
            self._session.query(query, params)
        except (psycopg.Error, StoreFailedError) as exc:
            raise ConnectionError(f"kill switch {what} failed at {self.where}: {exc}") from exc

    def describe(self) -> dict[str, object]:
        return {
            "kind": "postgres",
            "where": self.where,
            "checked": "before every effect",
            "watched": f"LISTEN/NOTIFY, re-read every {REFRESH} s; read directly when not fresh"
            if self._watching
            else False,
            "fail_closed": True,
        }

    def close(self) -> None:
        """Close the kept connection; a closed switch reads as unreadable (halted). Idempotent."""
        self._session.close()
        with self._watch_lock:
            self._closed = True
            watch, self._watch = self._watch, None
        if watch is not None:
            watch.close()

    def __enter__(self) -> PostgresKillSwitch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _state_of(rows: list[tuple[Any, ...]]) -> HaltState:
    if not rows or not rows[0][0]:
        return _NOT_HALTED
    _, reason, since = rows[0]
    return HaltState(True, str(reason), float(since) if isinstance(since, float) else None)


__all__ = ["PostgresKillSwitch"]
