"""The fleet-mode log store: one hash-chained log in a PostgreSQL schema, shared by many hosts.

Durability protocol (what is true when a call returns):

* A record is one row ``(seq, hash, line)`` of ``<schema>.records``; ``line`` holds the exact
  canonical bytes :meth:`Chain.seal` produced, so verification is byte-exact.
* ``append`` queues its entries; one thread at a time leads, writing every queued append of the
  process as one transaction (``commit``) that holds a transaction-scoped advisory lock, so
  writers on any host continue one chain from its current tail; ``seq`` is the primary key,
  global and gap-free (an aborted transaction inserts nothing). The transaction first takes a
  share lock on this owner's row, so once another host has declared the owner dead (deleted its
  expired row) no append of that owner can commit. When no other process appended since this
  store's last batch, the batch is one round trip and the lock is held only while the server
  runs it; otherwise an unkeyed chain's batch is sealed by the server in one message
  (``serverseal``) and a keyed chain's reads the tail under the lock first (``write``).
* ``append(..., sync=True)`` returns once the server has flushed its WAL past the record: the
  batch commits synchronously, or (while other processes append too, so that the lock is not
  held across a flush) commits without waiting and its message ends with a synchronous commit
  of this owner's heartbeat, whose commit record follows the batch's in the WAL. ``sync()`` commits
  the heartbeat on a second connection and checks that the last record this store appended is
  still there (it would be gone after a server crash that lost it). Flushes of different writers
  share the server's fsync.
* Any error while appending or flushing puts the store in a failed state: nothing from that
  batch is acknowledged, and every later append raises :class:`StoreFailedError` until it is
  reopened.

psycopg is imported inside the functions that need it, so importing this module is cheap.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from .._errors import ConfigurationError, CorruptLogError, StoreFailedError
from .._log.chain import Chain
from .._log.forks import ForkGuard
from .._log.records import GENESIS, Entry, Record
from .._log.store import VerifyReport
from .commit import GroupCommit, Heartbeat
from .connection import (
    DEFAULT_SCHEMA,
    PgSession,
    check_schema_name,
    display_url,
    durability_problems,
    one_line,
    require_psycopg,
    server_settings,
)
from .owners import FleetOwner, OwnerExpired, PostgresLease
from .read import check_tail, checked_records, paged_rows
from .sagas import fill_unindexed, open_saga_ids, saga_rows
from .schema import ensure_schema
from .serverseal import ServerSealWriter
from .sql import crash_model, queries
from .write import BatchWriter

if TYPE_CHECKING:
    from psycopg.sql import Composed

DEFAULT_OWNER_TTL = 15.0


class PostgresLogStore:
    """A durable, hash-chained log in a PostgreSQL schema, shared by processes on many hosts.

    Opening creates the schema if needed, registers this owner and checks that the stored tail
    is well formed; :meth:`verify` re-reads and re-checks the whole chain.

    Args:
        url: a libpq connection URL or ``key=value`` string.
        key: makes the hash chain keyed (HMAC-SHA-256).
        schema: the PostgreSQL schema that holds the log's tables (one log per schema).
        owner_ttl: seconds an owner stays alive without a heartbeat; a background thread
            refreshes it every third of that, and so does every flush.
        connect_timeout: seconds to wait for a connection.
        connections: 2 (the default) commits heartbeats and ``sync`` flushes on a connection of
            their own; 1 sends them on the append connection, between batches (a heartbeat then
            waits for the batch in flight, and goes out on a short-lived connection of its own
            when that batch has waited a third of ``owner_ttl`` for the log's lock): for many
            processes on a server with few connections to spare.

    Raises:
        ConfigurationError: psycopg is missing, ``schema`` is not a plain identifier, or
            ``connections`` is neither 1 nor 2.
        StoreFailedError: the server cannot be reached or the schema cannot be created.
        CorruptLogError: the stored tail is not a well-formed record.
    """

    kind = "postgres"

    def __init__(
        self,
        url: str,
        *,
        key: bytes | None = None,
        schema: str = DEFAULT_SCHEMA,
        owner_ttl: float = DEFAULT_OWNER_TTL,
        connect_timeout: float = 5.0,
        connections: int = 2,
    ) -> None:
        require_psycopg()
        import psycopg

        if owner_ttl <= 0:
            raise ConfigurationError("owner_ttl must be positive")
        if connections not in (1, 2):
            raise ConfigurationError(f"connections must be 1 or 2, got {connections!r}")
        self.schema = check_schema_name(schema)
        self.where = f"{display_url(url)} schema {schema}"
        self._chain = Chain(key)
        self._main = PgSession(url, connect_timeout)  # appends, reads, leases
        # Flushes and heartbeats; with one connection they take the append session's lock,
        # which no caller holds while it flushes (``commit``), so sharing cannot deadlock.
        self._flusher = PgSession(url, connect_timeout) if connections == 2 else self._main
        self._owner = FleetOwner(self._main, self._flusher, schema, owner_ttl)
        self.owner_id = self._owner.id
        self.fork_guard = ForkGuard(f"the PostgreSQL log store at {self.where}")
        self._q = queries(schema, self.owner_id, owner_ttl)
        self._closed = False
        self._indexed = False
        try:
            with self._main.lock:
                conn = self._main.connection()
                ensure_schema(conn, schema)
                tail = check_tail(conn, self._q["last"], self._chain, self.where)
                self._owner.register(conn)
            self._flusher.query("SELECT 1")
        except psycopg.Error as exc:
            self._close_sessions()
            raise StoreFailedError(f"{self.where}: cannot open the log: {exc}") from exc
        except BaseException:
            self._close_sessions()
            raise
        writer: BatchWriter | ServerSealWriter
        if self._chain.keyed:
            writer = BatchWriter(self._q, schema, self._chain, tail)
        else:
            writer = ServerSealWriter(self._q, schema, self._chain, tail)
        self._commit = GroupCommit(self._main, self._owner, writer, self.where, self.fork_guard)
        self._beat = Heartbeat(self._commit, owner_ttl)

    # -- writing ---------------------------------------------------------------------------

    def append(self, entries: Sequence[Entry], *, sync: bool) -> list[Record]:
        """Seal and insert ``entries`` in one transaction; with ``sync``, return once durable.

        Concurrent appends from this process's threads share that transaction (see
        ``commit``). Without ``sync`` the records are committed and visible to every reader when
        this returns, but a server crash may lose them until a later flush. A connection found
        broken is replaced and the batch settled once on the new one (retried if it had not
        committed); any other failure leaves the store failed.

        Raises:
            StoreFailedError: nothing of these entries is acknowledged.
            CodecError: these entries cannot be sealed (nothing of them is written).
        """
        return self._commit.append(entries, sync)

    def sync(self) -> None:
        """Make every record this store appended so far durable."""
        self._commit.check_usable()
        self._commit.sync_to(self._commit.written[0])

    def _query(
        self, query: str | Composed, params: tuple[object, ...] | dict[str, object] = ()
    ) -> list[tuple[Any, ...]]:
        """An idempotent statement on the main connection (retried once if it broke)."""
        self.fork_guard.check()
        if self._closed:
            raise StoreFailedError(f"{self.where}: store is closed")
        return self._main.query(query, params)

    # -- reading ------------------------------------------------------------------------------

    def _checked(self) -> Iterator[Record]:
        return checked_records(paged_rows(self._query, self._q["page"]), self._chain, self.where)

    def records(self) -> Iterator[Record]:
        """The records stored now, in ``seq`` order, verified while read.

        Raises:
            CorruptLogError: at the first record that is off the chain.
            StoreFailedError: the server cannot be read.
        """
        import psycopg

        try:
            yield from self._checked()
        except psycopg.Error as exc:
            raise StoreFailedError(f"{self.where}: cannot read the log: {exc}") from exc

    def saga_records(self, saga_id: str) -> list[Record]:
        """The records of ``saga_id`` in ``seq`` order, through the ``(saga, seq)`` index, each
        checked against its own hash (see ``_postgres.sagas``).

        Raises:
            CorruptLogError: a row is not the record it is indexed as.
            StoreFailedError: the server cannot be read.
        """
        import psycopg

        try:
            self._fill_unindexed()
            return saga_rows(self._query, self._q, self._chain, self.where, saga_id)
        except psycopg.Error as exc:
            raise StoreFailedError(f"{self.where}: cannot read the log: {exc}") from exc

    def unfinished_saga_ids(self) -> list[str]:
        """Ids of the sagas begun and not ended, oldest first (``open_sagas``: a hint, each
        saga is read and checked by :meth:`saga_records`)."""
        import psycopg

        try:
            self._fill_unindexed()
            return open_saga_ids(self._query, self._q)
        except psycopg.Error as exc:
            raise StoreFailedError(f"{self.where}: cannot read the log: {exc}") from exc

    def _fill_unindexed(self) -> None:
        if not self._indexed:
            fill_unindexed(self._query, self._q, self.schema)
            self._indexed = True

    def verify(self) -> VerifyReport:
        """Re-read and re-check every stored record; never raises on bad content or I/O."""
        import psycopg

        count, last = 0, GENESIS
        try:
            for record in self._checked():
                count, last = count + 1, record.hash
        except CorruptLogError as exc:
            return VerifyReport(False, count, exc, last)
        except (psycopg.Error, StoreFailedError) as exc:
            error = CorruptLogError(self.where, count, f"unreadable: {exc}")
            return VerifyReport(False, count, error, last)
        return VerifyReport(True, count, None, last)

    # -- facts --------------------------------------------------------------------------------

    def _settings(self) -> dict[str, str]:
        if self._closed:
            raise StoreFailedError(f"{self.where}: store is closed")
        return server_settings(self._main, self._flusher)

    def health(self) -> list[str]:
        """Problems that make the store unfit to log an effect now; never raises."""
        import psycopg

        if self._closed:
            return ["log store is closed"]
        failed = self._commit.failed
        problems = [f"log store failed: {one_line(failed)}"] if failed is not None else []
        if self._beat.error is not None:
            problems.append(f"owner heartbeat failing: {one_line(self._beat.error)}")
        try:
            problems.extend(durability_problems(self._settings()))
        except (psycopg.Error, StoreFailedError) as exc:
            problems.append(f"PostgreSQL server cannot be read ({self.where}): {one_line(exc)}")
        return problems

    def describe(self) -> dict[str, object]:
        """Durability facts read from the server now (``durable`` is false when unreadable)."""
        import psycopg

        facts: dict[str, object] = {
            "kind": self.kind,
            "where": self.where,
            "group_commit": True,
            "multi_process": "advisory lock per batch, held while the server runs it; any host",
            "owner_liveness": f"heartbeat row, ttl {self._owner.ttl:g} s",
            "leases": "row with expiry, taken by INSERT ... ON CONFLICT",
            "verified_on_open": "tail record only",
            "keyed_chain": self._chain.keyed,
        }
        try:
            settings = self._settings()
        except (psycopg.Error, StoreFailedError) as exc:
            unreadable = {"durable": False, "survives": [], "unreadable": one_line(exc)}
            return {**facts, **unreadable, "crash_model": crash_model(None)}
        durable = not durability_problems(settings)
        survives = ["process crash", "server crash", "power loss (server fsync)"] if durable else []
        model = crash_model(settings)
        return {
            **facts,
            **settings,
            "durable": durable,
            "survives": survives,
            "crash_model": model,
        }

    # -- owners and leases ------------------------------------------------------------------

    def owner_alive(self, owner_id: str) -> bool:
        """False when ``owner_id`` closed its store or let its heartbeat expire.

        An expired owner row is deleted here, which fences it: its later appends fail. When the
        server cannot be read, the owner is reported alive (nothing is proven gone).
        """
        if owner_id == self.owner_id:
            return not self._closed and not isinstance(self._commit.failed, OwnerExpired)
        if self._closed:
            return True
        return self._owner.alive(owner_id)

    def lease(self, name: str, *, ttl: float) -> PostgresLease | None:
        """Take lease ``name`` for ``ttl`` seconds (server clock), or ``None`` if it is held.

        Exactly one of many racing callers on any host gets it; it is free again when released,
        when ``ttl`` has passed, or when this store is closed. The grant is durable on return.
        The holder keeps it with ``renew`` and writes through its ``append``, which commits
        only while the grant holds the lease.

        Raises:
            StoreFailedError: the store is closed or failed, or the server cannot be reached.
        """
        import psycopg

        if ttl <= 0:
            raise ValueError("ttl must be positive")
        self._commit.check_usable()
        try:
            token = self._owner.take(name, ttl)
        except psycopg.Error as exc:
            raise StoreFailedError(f"{self.where}: cannot take lease {name!r}: {exc}") from exc
        if token is None:
            return None
        return PostgresLease(name, token, self._owner, self._commit.append)

    @property
    def url(self) -> str:
        """The connection URL this store was opened with (it may hold a password)."""
        return self._main.url

    @property
    def connect_timeout(self) -> float:
        """Seconds to wait for a connection, and for a statement."""
        return self._main.timeout

    # -- closing --------------------------------------------------------------------------------

    def close(self) -> None:
        """Flush what this store appended, then remove its owner row and leases. Idempotent.

        After ``close`` returns, :meth:`owner_alive` reports this owner gone to every host.
        """
        import psycopg

        if self._closed:
            return
        if self.fork_guard.inherited:
            # The sockets, owner row and heartbeat are the parent's: closing a connection here
            # would end the parent's session. Drop this process's view of them only.
            self._closed = True
            return
        commit = self._commit
        try:
            if commit.failed is None and commit.synced < commit.written[0]:
                commit.sync_to(commit.written[0])
        finally:
            self._beat.stop()
            with self._main.lock:
                self._closed = commit.closed = True
                with contextlib.suppress(psycopg.Error, StoreFailedError):  # else it expires
                    self._owner.retire(self._main.connection())
            self._close_sessions()

    def _close_sessions(self) -> None:
        self._main.close()
        self._flusher.close()

    def __enter__(self) -> PostgresLogStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["PostgresLease", "PostgresLogStore"]
