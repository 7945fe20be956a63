"""The fleet-mode kill switch: one row in a PostgreSQL schema, read before every effect.

Reading is fail-closed: when the row cannot be read (no server, refused login, a bad URL, a
query error), the answer is "halted" with ``readable=False``. The switch keeps one connection so
a read costs one round trip; a broken connection is replaced and the read retried once.
``halt`` and ``resume`` return once their change is committed with ``synchronous_commit = on``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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

    Raises:
        ConfigurationError: psycopg is missing, or ``schema`` is not a plain identifier.
    """

    @classmethod
    def beside(cls, store: PostgresLogStore) -> PostgresKillSwitch:
        """The fleet's kill switch: a row in ``store``'s schema on the same server."""
        return cls(store.url, schema=store.schema, timeout=store.connect_timeout)

    def __init__(self, url: str, *, schema: str = DEFAULT_SCHEMA, timeout: float = 5.0) -> None:
        require_psycopg()
        from psycopg import sql

        self.schema = check_schema_name(schema)
        self._timeout = timeout
        self.where = f"{display_url(url)} schema {schema}"
        table = sql.Identifier(schema, "kill_switch")
        self._read_q: Composed = sql.SQL(
            "SELECT halted, reason, since FROM {t} WHERE id = 1"
        ).format(t=table)
        self._halt_q: Composed = sql.SQL(
            "INSERT INTO {t} (id, halted, reason, since) VALUES (1, true, %s, %s)"
            " ON CONFLICT (id) DO UPDATE SET halted = true, reason = EXCLUDED.reason,"
            " since = EXCLUDED.since, changed_at = clock_timestamp()"
        ).format(t=table)
        self._resume_q: Composed = sql.SQL(
            "UPDATE {t} SET halted = false, reason = '', since = NULL,"
            " changed_at = clock_timestamp() WHERE id = 1 AND halted"
        ).format(t=table)
        self._session = PgSession(url, timeout, setup=self._setup)

    def _setup(self, conn: PgConnection) -> None:
        timeout_ms = str(int(self._timeout * 1000))
        conn.execute("SELECT set_config('statement_timeout', %s, false)", (timeout_ms,))
        ensure_schema(conn, self.schema)

    def state(self) -> HaltState:
        """Read the switch now; any failure to read it is reported as halted."""
        try:
            rows = self._session.query(self._read_q)
        except Exception as exc:
            reason = f"kill switch unreadable: {self.where}: {one_line(exc)}"
            return HaltState(True, reason, readable=False)
        if not rows or not rows[0][0]:
            return _NOT_HALTED
        _, reason, since = rows[0]
        return HaltState(True, str(reason), float(since) if isinstance(since, float) else None)

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
            "fail_closed": True,
        }

    def close(self) -> None:
        """Close the kept connection; a closed switch reads as unreadable (halted). Idempotent."""
        self._session.close()

    def __enter__(self) -> PostgresKillSwitch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["PostgresKillSwitch"]
