"""The fleet-mode log store: one hash-chained log in a PostgreSQL schema, shared by many hosts.

Durability protocol (what is true when a call returns):

* A record is one row ``(seq, hash, line)`` of ``<schema>.records``; ``line`` holds the exact
  canonical bytes :meth:`Chain.seal` produced, so verification is byte-exact.
* ``append`` seals and inserts a batch in one transaction holding a transaction-scoped advisory
  lock, so writers on any host continue one chain from its current tail; ``seq`` is the primary
  key, global and gap-free (an aborted transaction inserts nothing). That transaction commits
  with ``synchronous_commit = off``, so the lock is not held across the WAL flush.
* ``append(..., sync=True)`` and ``sync()`` then commit a write (this owner's heartbeat) with
  ``synchronous_commit = on``, which returns only once the server has flushed its WAL up to that
  commit, and so past every record appended before it; the same statement checks that the last
  record this store appended is still there (it would be gone after a server crash that lost it).
  Concurrent callers share one flush, and flushes of different writers share the server's fsync.
* Any error while appending or flushing puts the store in a failed state: nothing from that call
  is acknowledged, and every later append raises :class:`StoreFailedError` until it is reopened.

psycopg is imported inside the functions that need it, so importing this module is cheap.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ._chain import Chain, ChainBreak, parse_line
from ._errors import ConfigurationError, CorruptLogError, StoreFailedError
from ._pgsession import (
    DEFAULT_SCHEMA,
    PgSession,
    check_schema_name,
    display_url,
    ensure_schema,
    lock_key,
    one_line,
    require_psycopg,
)
from ._records import GENESIS, Entry, Record
from ._store import VerifyReport

if TYPE_CHECKING:
    from psycopg.sql import Composed

    from ._pgsession import PgConnection

DEFAULT_OWNER_TTL = 15.0
_PAGE = 1000
_DURABLE_COMMIT = frozenset({"on", "remote_write", "remote_apply", "local"})


def _queries(schema: str) -> dict[str, Composed]:
    from psycopg import sql

    text = {
        "tail": "SELECT seq, hash FROM {s}.records ORDER BY seq DESC LIMIT 1",
        "insert": "INSERT INTO {s}.records (seq, hash, line) VALUES (%s, %s, %s)",
        "page": "SELECT seq, hash, line FROM {s}.records WHERE seq > %s ORDER BY seq LIMIT %s",
        "register": "INSERT INTO {s}.owners (owner_id, host, pid, expires_at)"
        " VALUES (%s, %s, %s, clock_timestamp() + make_interval(secs => %s))",
        "beat": "UPDATE {s}.owners SET expires_at = clock_timestamp() + make_interval(secs => %s)"
        " WHERE owner_id = %s AND expires_at > clock_timestamp()"
        " RETURNING (SELECT hash FROM {s}.records WHERE seq = %s)",
        "alive": "WITH gone AS (DELETE FROM {s}.owners WHERE owner_id = %(o)s"
        " AND expires_at <= clock_timestamp() RETURNING 1)"
        " SELECT EXISTS (SELECT 1 FROM {s}.owners WHERE owner_id = %(o)s)"
        " AND NOT EXISTS (SELECT 1 FROM gone)",
        "take": "INSERT INTO {s}.leases (name, holder, token, expires_at)"
        " VALUES (%s, %s, %s, clock_timestamp() + make_interval(secs => %s))"
        " ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, token = EXCLUDED.token,"
        " expires_at = EXCLUDED.expires_at WHERE leases.expires_at <= clock_timestamp()"
        " RETURNING token",
        "give_back": "DELETE FROM {s}.leases WHERE name = %s AND token = %s",
        "drop_owner": "DELETE FROM {s}.owners WHERE owner_id = %s",
        "drop_leases": "DELETE FROM {s}.leases WHERE holder = %s",
    }
    ident = sql.Identifier(schema)
    return {name: sql.SQL(q).format(s=ident) for name, q in text.items()}


class _OwnerLost(Exception):
    pass


class _NotSent(Exception):
    """The connection broke before the commit was sent: nothing from the batch was written."""


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

    Raises:
        ConfigurationError: psycopg is missing, or ``schema`` is not a plain identifier.
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
    ) -> None:
        require_psycopg()
        import psycopg

        if owner_ttl <= 0:
            raise ConfigurationError("owner_ttl must be positive")
        self.schema = check_schema_name(schema)
        self._ttl = owner_ttl
        self.where = f"{display_url(url)} schema {schema}"
        self._chain = Chain(key)
        self._q = _queries(schema)
        self._append_key = lock_key(schema, "append")
        self.owner_id = f"{socket.gethostname()}-{os.getpid()}-{os.urandom(6).hex()}"
        self._main = PgSession(url, connect_timeout)  # appends, reads, leases
        self._flusher = PgSession(url, connect_timeout)  # flushes and heartbeats
        self._sync_cond = threading.Condition()
        self._failed: BaseException | None = None
        self._closed = False
        self._written: tuple[int, str] = (0, GENESIS)  # last record this store appended
        self._synced = 0
        self._syncing = False
        self._beat_error: Exception | None = None
        try:
            with self._main.lock:
                conn = self._main.connection()
                ensure_schema(conn, schema)
                self._check_tail(conn)
                host, pid = socket.gethostname(), os.getpid()
                conn.execute(self._q["register"], (self.owner_id, host, pid, owner_ttl))
            self._flusher.query("SELECT 1")
        except psycopg.Error as exc:
            self._close_sessions()
            raise StoreFailedError(f"{self.where}: cannot open the log: {exc}") from exc
        except BaseException:
            self._close_sessions()
            raise
        self._stop = threading.Event()
        self._beater = threading.Thread(target=self._heartbeat, name="agent-saga-pg", daemon=True)
        self._beater.start()

    # -- writing ---------------------------------------------------------------------------

    def append(self, entries: Sequence[Entry], *, sync: bool) -> list[Record]:
        """Seal and insert ``entries`` as one transaction; with ``sync``, return once durable.

        Without ``sync`` the records are committed and visible to every reader when this
        returns, but a server crash may lose them until a later flush. A connection found
        broken before the commit was sent (nothing written) is replaced and the batch retried
        once; any other failure leaves the store failed.
        """
        import psycopg

        with self._main.lock:
            self._check_usable()
            try:
                try:
                    out = self._insert(self._main.connection(), entries)
                except _NotSent:
                    out = self._insert(self._main.connection(), entries)
            except (_OwnerLost, _NotSent, psycopg.Error) as exc:
                self._fail(exc)
                raise StoreFailedError(f"{self.where}: append failed: {exc}") from exc
            if out:
                self._written = (out[-1].seq, out[-1].hash)
            target = self._written[0]
        if sync:
            self._sync_to(target)
        return out

    def _insert(self, conn: PgConnection, entries: Sequence[Entry]) -> list[Record]:
        import psycopg

        out: list[Record] = []
        committing = False
        try:
            with conn.pipeline(), conn.transaction():
                conn.execute("SET LOCAL synchronous_commit = off")
                fence = conn.execute(self._q["beat"], (self._ttl, self.owner_id, 0))
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._append_key,))
                tail = conn.execute(self._q["tail"]).fetchone()
                if fence.rowcount != 1:
                    raise _OwnerLost(f"owner {self.owner_id} expired; reopen the store")
                seq, prev = (int(tail[0]), str(tail[1])) if tail else (0, GENESIS)
                rows: list[tuple[int, str, bytes]] = []
                for entry in entries:
                    seq += 1
                    record, line = self._chain.seal(entry, seq, prev)
                    out.append(record)
                    rows.append((seq, record.hash, line[:-1]))
                    prev = record.hash
                if rows:
                    conn.cursor().executemany(self._q["insert"], rows)
                committing = True
        except psycopg.OperationalError as exc:
            if not committing and conn.broken:
                raise _NotSent(str(exc)) from exc
            raise
        return out

    def sync(self) -> None:
        """Make every record this store appended so far durable."""
        self._check_usable()
        self._sync_to(self._written[0])

    def _sync_to(self, target: int) -> None:
        with self._sync_cond:
            while self._synced < target:
                if self._failed is not None:
                    raise StoreFailedError(f"{self.where}: store failed: {self._failed}")
                if self._syncing:
                    self._sync_cond.wait()
                    continue
                self._syncing = True
                upto = self._written
                self._sync_cond.release()
                try:
                    self._flush(upto)
                except Exception as exc:
                    self._fail(exc)
                finally:
                    self._sync_cond.acquire()
                    self._syncing = False
                    self._sync_cond.notify_all()
                if self._failed is None:
                    self._synced = max(self._synced, upto[0])
            if self._failed is not None:
                raise StoreFailedError(f"{self.where}: store failed: {self._failed}")

    def _flush(self, upto: tuple[int, str]) -> None:
        """Commit a heartbeat synchronously; the record ``upto`` must still be stored."""
        seq, digest = upto
        rows = self._flusher.query(self._q["beat"], (self._ttl, self.owner_id, seq))
        if not rows:
            raise _OwnerLost(f"owner {self.owner_id} expired; reopen the store")
        if seq and rows[0][0] != digest:
            raise StoreFailedError(f"record {seq} appended by this store is no longer stored")

    def _heartbeat(self) -> None:
        """Refresh the owner row every third of its ttl; a broken connection is replaced."""
        while not self._stop.wait(self._ttl / 3):
            try:
                self._flush((0, GENESIS))
            except _OwnerLost as exc:
                self._fail(exc)
                return
            except Exception as exc:
                self._beat_error = exc
            else:
                self._beat_error = None

    def _fail(self, exc: BaseException) -> None:
        if self._failed is None:
            self._failed = exc

    def _check_usable(self) -> None:
        if self._closed:
            raise StoreFailedError(f"{self.where}: store is closed")
        if self._failed is not None:
            raise StoreFailedError(f"{self.where}: store failed ({self._failed}); reopen it")

    def _query(
        self, query: str | Composed, params: tuple[object, ...] | dict[str, object] = ()
    ) -> list[tuple[Any, ...]]:
        """An idempotent statement on the main connection (retried once if it broke)."""
        if self._closed:
            raise StoreFailedError(f"{self.where}: store is closed")
        return self._main.query(query, params)

    # -- reading ------------------------------------------------------------------------------

    def _check_tail(self, conn: PgConnection) -> None:
        from psycopg import sql

        query = sql.SQL("SELECT seq, hash, line FROM {s}.records ORDER BY seq DESC LIMIT 1")
        row = conn.execute(query.format(s=sql.Identifier(self.schema))).fetchone()
        if row is None:
            return
        seq, digest, line = int(row[0]), str(row[1]), bytes(row[2])
        result = parse_line(self._chain, line, seq, _prev_field(line))
        if isinstance(result, ChainBreak):
            reason = result.reason
        elif digest != result.hash:
            reason = "hash column does not match the record"
        else:
            return
        raise CorruptLogError(self.where, seq - 1, f"stored tail: {reason}", seq=seq)

    def _pages(self) -> Iterator[tuple[int, str, bytes]]:
        after = 0
        while True:
            rows = self._query(self._q["page"], (after, _PAGE))
            for seq, digest, line in rows:
                yield int(seq), str(digest), bytes(line)
            if len(rows) < _PAGE:
                return
            after = int(rows[-1][0])

    def _checked(self) -> Iterator[Record]:
        prev, expect = GENESIS, 1
        for seq, digest, line in self._pages():
            index = expect - 1
            if seq != expect:
                reason = f"row seq {seq} where {expect} was expected (a record is missing)"
                raise CorruptLogError(self.where, index, reason, seq=expect)
            result = parse_line(self._chain, line, expect, prev)
            if isinstance(result, ChainBreak):
                raise CorruptLogError(self.where, index, result.reason, seq=expect)
            if digest != result.hash:
                reason = "hash column does not match the record"
                raise CorruptLogError(self.where, index, reason, seq=expect)
            yield result
            prev, expect = result.hash, expect + 1

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
        query = (
            "SELECT current_setting('server_version'), current_setting('fsync'),"
            " current_setting('full_page_writes'),"
            " (SELECT reset_val FROM pg_settings WHERE name = 'synchronous_commit')"
        )
        row = self._query(query)[0]
        effective = self._flusher.query("SHOW synchronous_commit")[0]
        return {
            "server_version": str(row[0]),
            "fsync": str(row[1]),
            "full_page_writes": str(row[2]),
            "server_synchronous_commit": str(row[3]),
            "flush_synchronous_commit": str(effective[0]),
        }

    @staticmethod
    def _unsafe(settings: dict[str, str]) -> list[str]:
        problems = []
        if settings["fsync"] != "on":
            problems.append("server has fsync=off: committed records may be lost in a crash")
        if settings["full_page_writes"] != "on":
            problems.append("server has full_page_writes=off: a power loss may tear pages")
        if settings["flush_synchronous_commit"] not in _DURABLE_COMMIT:
            commit = settings["flush_synchronous_commit"]
            problems.append(f"flush connection has synchronous_commit={commit}")
        return problems

    def health(self) -> list[str]:
        """Problems that make the store unfit to log an effect now; never raises."""
        import psycopg

        if self._closed:
            return ["log store is closed"]
        problems = [f"log store failed: {self._failed}"] if self._failed is not None else []
        if self._beat_error is not None:
            problems.append(f"owner heartbeat failing: {one_line(self._beat_error)}")
        try:
            problems.extend(self._unsafe(self._settings()))
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
            "multi_process": "transaction-scoped advisory lock per batch; any host",
            "owner_liveness": f"heartbeat row, ttl {self._ttl:g} s",
            "leases": "row with expiry, taken by INSERT ... ON CONFLICT",
            "verified_on_open": "tail record only",
            "keyed_chain": self._chain.keyed,
        }
        try:
            settings = self._settings()
        except (psycopg.Error, StoreFailedError) as exc:
            return {**facts, "durable": False, "survives": [], "unreadable": str(exc)}
        durable = not self._unsafe(settings)
        survives = ["process crash", "server crash", "power loss (server fsync)"] if durable else []
        return {**facts, **settings, "durable": durable, "survives": survives}

    # -- owners and leases ------------------------------------------------------------------

    def owner_alive(self, owner_id: str) -> bool:
        """False when ``owner_id`` closed its store or let its heartbeat expire.

        An expired owner row is deleted here, which fences it: its later appends fail. When the
        server cannot be read, the owner is reported alive (nothing is proven gone).
        """
        import psycopg

        if owner_id == self.owner_id:
            return not self._closed and not isinstance(self._failed, _OwnerLost)
        try:
            rows = self._query(self._q["alive"], {"o": owner_id})
        except (psycopg.Error, StoreFailedError):
            return True
        return bool(rows and rows[0][0])

    def lease(self, name: str, *, ttl: float) -> PostgresLease | None:
        """Take lease ``name`` for ``ttl`` seconds (server clock), or ``None`` if it is held.

        Exactly one of many racing callers on any host gets it; it is free again when released,
        when ``ttl`` has passed, or when this store is closed. The grant is committed durably.

        Raises:
            StoreFailedError: the server cannot be reached.
        """
        import psycopg

        if ttl <= 0:
            raise ValueError("ttl must be positive")
        token = os.urandom(16).hex()
        try:
            with self._main.lock:
                self._check_usable()
                conn = self._main.connection()
                row = conn.execute(self._q["take"], (name, self.owner_id, token, ttl)).fetchone()
        except psycopg.Error as exc:
            raise StoreFailedError(f"{self.where}: cannot take lease {name!r}: {exc}") from exc
        return PostgresLease(name, token, self) if row is not None else None

    def _give_back(self, name: str, token: str) -> None:
        import psycopg

        with contextlib.suppress(psycopg.Error, StoreFailedError):  # else it ends at expiry
            self._query(self._q["give_back"], (name, token))

    # -- closing --------------------------------------------------------------------------------

    def close(self) -> None:
        """Flush what this store appended, then remove its owner row and leases. Idempotent.

        After ``close`` returns, :meth:`owner_alive` reports this owner gone to every host.
        """
        import psycopg

        if self._closed:
            return
        try:
            if self._failed is None and self._synced < self._written[0]:
                self._sync_to(self._written[0])
        finally:
            self._stop.set()
            self._beater.join()
            with self._main.lock:
                self._closed = True
                try:
                    conn = self._main.connection()
                    conn.execute(self._q["drop_leases"], (self.owner_id,))
                    conn.execute(self._q["drop_owner"], (self.owner_id,))
                except (psycopg.Error, StoreFailedError):
                    pass  # the owner row expires instead
            self._close_sessions()

    def _close_sessions(self) -> None:
        self._main.close()
        self._flusher.close()

    def __enter__(self) -> PostgresLogStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PostgresLease:
    """A lease row held by one store; :meth:`release` is idempotent and never raises."""

    def __init__(self, name: str, token: str, store: PostgresLogStore) -> None:
        self.name = name
        self._token = token
        self._store: PostgresLogStore | None = store

    def release(self) -> None:
        if self._store is not None:
            self._store._give_back(self.name, self._token)
            self._store = None


def _prev_field(line: bytes) -> str:
    """The ``prev`` a stored line claims (checked by hash, not trusted)."""
    marker = line.find(b'"prev":"')
    return line[marker + 8 : marker + 72].decode("ascii", "replace") if marker >= 0 else ""


__all__ = ["PostgresLease", "PostgresLogStore"]
