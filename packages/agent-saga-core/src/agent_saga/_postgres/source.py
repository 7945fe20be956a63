"""The fleet log on PostgreSQL as a read-only source of verified records (for the commands).

Unlike :class:`~agent_saga._postgres.store.PostgresLogStore`, reading registers no owner,
creates no table and starts no thread: one connection in a read-only session
(``default_transaction_read_only``) pages through ``<schema>.records`` in ``seq`` order, so
memory stays bounded by one page of rows, and checks every row against the chain as it goes.
There is no synced watermark here: rows removed from the end are found by a checkpoint.

psycopg is imported inside the methods, so importing this module is cheap.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING

from .._errors import CorruptLogError, StoreFailedError
from .._log.chain import Chain
from .._log.records import Record
from .._log.source import explain_first_record
from .connection import (
    DEFAULT_SCHEMA,
    PgSession,
    check_schema_name,
    display_url,
    one_line,
    require_psycopg,
)
from .read import checked_records, paged_rows
from .sagas import matching_saga_ids, saga_rows
from .sql import queries

if TYPE_CHECKING:
    from .connection import PgConnection

__all__ = ["PostgresLogSource"]


def _read_only(conn: PgConnection) -> None:
    conn.execute("SET default_transaction_read_only = on")


class PostgresLogSource:
    """Read-only access to the fleet log in ``schema`` at ``url`` (see the module docstring).

    Raises:
        ConfigurationError: psycopg is missing, or ``schema`` is not a plain identifier.
    """

    kind = "postgres"
    unit = "record"

    def __init__(
        self,
        url: str,
        *,
        key: bytes | None = None,
        schema: str | None = None,
        connect_timeout: float = 5.0,
    ) -> None:
        require_psycopg()
        self.schema = check_schema_name(schema or DEFAULT_SCHEMA)
        self.where = f"{display_url(url)} schema {self.schema}"
        self.key = key
        self._session = PgSession(url, connect_timeout, setup=_read_only)
        self._q = queries(self.schema, "")

    def _query_failed(self, exc: Exception) -> StoreFailedError:
        return StoreFailedError(f"{self.where}: cannot read the log: {one_line(exc)}")

    def exists(self) -> bool:
        """Whether the schema holds a log table (raises :class:`StoreFailedError` if unreadable)."""
        import psycopg

        try:
            rows = self._session.query(
                "SELECT 1 FROM pg_tables WHERE schemaname = %s AND tablename = 'records'",
                (self.schema,),
            )
        except psycopg.Error as exc:
            raise self._query_failed(exc) from exc
        return bool(rows)

    def _checked(self, chain: Chain) -> Generator[Record]:
        import psycopg

        try:
            yield from checked_records(
                paged_rows(self._session.query, self._q["page"]), chain, self.where
            )
        except psycopg.Error as exc:
            raise self._query_failed(exc) from exc

    def records(self) -> Generator[Record]:
        """The stored records in ``seq`` order, verified while read, one page at a time.

        Raises:
            CorruptLogError: a row is missing, off the chain or mislabelled
                (:class:`~agent_saga._log.source.ChainKeyError` when record 1 does not fit
                the key given, or the absence of one).
            StoreFailedError: the server or the table cannot be read.
        """
        try:
            yield from self._checked(Chain(self.key))
        except CorruptLogError as exc:
            explained = explain_first_record(exc, self)
            if explained is exc:
                raise
            raise explained from exc

    def saga_ids(self, text: str) -> tuple[list[str], int | None] | None:
        """The ids ``text`` (an id or a prefix) may name, oldest first, read from the ``saga``
        column (see :func:`~agent_saga._postgres.sagas.matching_saga_ids`), with how many sagas
        the log holds when none matches; ``None`` when rows written by an earlier version have
        no ``saga`` column yet (a read-only session cannot fill it in: read the whole log).

        Raises:
            StoreFailedError: the server or the table cannot be read.
        """
        import psycopg

        try:
            if self._session.query(self._q["unindexed"], (1,)):
                return None
            return matching_saga_ids(self._session.query, self._q, text)
        except psycopg.Error as exc:
            raise self._query_failed(exc) from exc

    def saga_records(self, saga_id: str) -> list[Record]:
        """The records of ``saga_id`` in ``seq`` order through the ``(saga, seq)`` index, each
        checked against its own hash and saga (not against the chain: ``verify`` does that).

        Raises:
            CorruptLogError: a row is not the record it is indexed as.
            StoreFailedError: the server or the table cannot be read.
        """
        import psycopg

        try:
            return saga_rows(self._session.query, self._q, Chain(self.key), self.where, saga_id)
        except psycopg.Error as exc:
            raise self._query_failed(exc) from exc

    def first_lines(self) -> list[bytes]:
        rows = paged_rows(self._session.query, self._q["page"])
        return [line for _, (_seq, _digest, line) in zip(range(2), rows, strict=False)]

    def fits_unkeyed(self) -> bool:
        first = self._checked(Chain())
        try:
            next(first)
        except (CorruptLogError, StopIteration):
            return False
        finally:
            first.close()
        return True

    def owner_alive(self, owner_id: str) -> bool:
        """Whether ``owner_id``'s heartbeat row is present and unexpired (nothing is deleted).

        When the server cannot be read the owner counts as alive (nothing is proven gone).
        """
        import psycopg
        from psycopg import sql

        statement = sql.SQL(
            "SELECT EXISTS (SELECT 1 FROM {s}.owners WHERE owner_id = %s"
            " AND expires_at > clock_timestamp())"
        ).format(s=sql.Identifier(self.schema))
        try:
            rows = self._session.query(statement, (owner_id,))
        except psycopg.Error:
            return True
        return bool(rows and rows[0][0])

    def close(self) -> None:
        """Close the connection. Idempotent."""
        self._session.close()
