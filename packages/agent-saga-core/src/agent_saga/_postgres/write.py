"""Batches of records into the PostgreSQL log: one round trip when the tail is known.

A batch is one transaction that fences this owner (a share lock on its row, which fails once
another host has declared the owner dead), takes the log's transaction-scoped advisory lock and
continues the chain from the stored tail. Statements travel as literals in the simple protocol,
several to a message, each with its own snapshot (so the tail is read after the lock is granted).
Two ways to send it:

* **known tail** (one round trip, one statement): the records are sealed after the tail this
  writer left, and the server function ``schema.PUT`` fences the owner, takes the lock, checks
  that the tail is still the stored one (it aborts the transaction otherwise) and inserts; the
  statement's implicit transaction commits. The lock is held only while the server runs it;
  when the batch must be durable its commit waits for the WAL flush (one flush, the lock held
  across it: taken only while no other process has appended lately, so nobody else is usually
  waiting). A batch fenced by a lease sends the same steps as separate statements.
* **read tail** (two round trips): the first message locks and reads the tail, the second
  inserts the sealed batch and commits with ``synchronous_commit = off``, so the lock is never
  held across a flush; a durable batch's message then commits the owner's heartbeat
  synchronously, which returns once the WAL is flushed past the batch. Used when another
  process moved the tail, until :data:`CALM_BATCHES` batches in a row find it where this
  writer left it, and after a broken connection.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TypeAlias

from .._errors import LeaseLostError
from .._log.chain import Chain
from .._log.codec import CodecError
from .._log.records import GENESIS, Entry, Record
from .owners import LEASE_LOST, OwnerExpired
from .schema import EXPECT_FAILED

if TYPE_CHECKING:
    from psycopg import Cursor
    from psycopg.rows import TupleRow
    from psycopg.sql import Composed

    from .connection import PgConnection

Tail = tuple[int, str]
_MOVED = "tail moved"
CALM_BATCHES = 8
"""Batches in a row that must find the tail where this writer left it before the known-tail
path is tried again (each failed try costs a round trip, and holds others up)."""
Outcome: TypeAlias = list[Record] | CodecError
"""One group's records, or why its entries could not be sealed (nothing of it is written)."""


class NotSent(Exception):
    """The connection broke before a commit was sent: nothing from the batch was written."""


class Unknown(Exception):
    """The connection broke after a message holding the commit was sent: it may have committed.

    Attributes:
        sealed: the batch as sent in that message (a :class:`Sealed` here, see
            :meth:`BatchWriter.read_tail`; a ``serverseal.PreparedBatch`` there).
    """

    def __init__(self, message: str, sealed: object) -> None:
        super().__init__(message)
        self.sealed = sealed


class _TailMoved(Exception):
    """The stored tail is no longer the one the batch was sealed after; nothing was written."""


class Sealed:
    """Groups of entries sealed after ``tail``: each group's outcome, and the rows to insert.

    A group whose entries cannot be sealed is refused alone (its outcome is the
    :class:`CodecError`); the chain goes on from the group before it.
    """

    def __init__(self, chain: Chain, groups: Sequence[Sequence[Entry]], tail: Tail) -> None:
        self.outcomes: list[Outcome] = []
        self.rows: list[tuple[str, str, str, str, str]] = []
        """Each record's ``(seq, hash, line, saga, kind)`` as SQL literals (see :func:`_row`)."""
        self.first: Record | None = None
        seq, prev = tail
        for group in groups:
            records: list[Record] = []
            lines: list[bytes] = []
            try:
                for entry in group:
                    record, line = chain.seal(entry, seq + len(records) + 1, prev)
                    records.append(record)
                    lines.append(line)
                    prev = record.hash
            except CodecError as exc:
                prev = records[0].prev if records else prev
                self.outcomes.append(exc)
                continue
            for record, line in zip(records, lines, strict=True):
                self.rows.append(_row(record, line))
            self.outcomes.append(records)
            if records:
                self.first = self.first or records[0]
                seq = records[-1].seq
        self.last: Tail = (seq, prev)

    def values(self) -> str:
        """The rows as ``(seq, hash, line, saga, kind), ...`` for an ``INSERT``."""
        return ", ".join(f"({','.join(row)})" for row in self.rows)

    def arrays(self) -> str:
        """The rows as five arrays, one per column (the arguments of ``schema.PUT``)."""
        columns = zip(*self.rows, strict=True)
        types = ("bigint", "text", "bytea", "text", "text")
        return ",".join(
            f"ARRAY[{','.join(column)}]::{kind}[]"
            for column, kind in zip(columns, types, strict=True)
        )


_HEX = re.compile(r"[0-9a-f]{64}")


def _row(record: Record, line: bytes) -> tuple[str, str, str, str, str]:
    """``(seq, hash, line, saga, kind)`` as SQL literals: digits, a checked hex digest, the
    line in hex, and the saga and kind (hints for the indexes, checked against the line when
    read) in hex."""
    return (
        str(record.seq),
        _digest(record.hash),
        f"decode('{line[:-1].hex()}','hex')",
        "NULL" if record.saga is None else _text(record.saga),
        _text(record.kind),
    )


def _digest(value: str) -> str:
    """A hex digest as a literal (checked: it is put in the statement as it is)."""
    if not _HEX.fullmatch(value):
        raise ValueError(f"malformed hash {value[:80]!r}")
    return f"'{value}'"


def _text(value: str) -> str:
    """A text literal built from hex digits only (nothing the value holds can end it)."""
    return f"convert_from(decode('{value.encode().hex()}','hex'),'UTF8')"


class BatchWriter:
    """Writes batches for one store on its main connection, remembering the tail it last saw.

    Not thread-safe: one leader at a time (see ``commit``).

    Args:
        q: the store's statements (``sql.queries``).
        schema: the schema holding the log.
        chain: seals the records.
        tail: the stored tail when the store opened.
    """

    def __init__(self, q: Mapping[str, Composed], schema: str, chain: Chain, tail: Tail) -> None:
        from psycopg import sql

        self._q = q
        self._s = sql.Identifier(schema)
        self._chain = chain
        self.tail: Tail | None = tail
        """The stored tail after this writer's last batch, or ``None`` while writers interleave
        (until :data:`CALM_BATCHES` batches in a row found the tail unmoved) or a connection
        broke."""
        self._mine = tail
        self._calm = 0
        self._put: bytes | None = None

    def write(
        self,
        conn: PgConnection,
        groups: Sequence[Sequence[Entry]],
        flush: bool,
        fence: Composed | None = None,
    ) -> tuple[list[Outcome], bool]:
        """Commit ``groups`` as one batch; returns each group's outcome and whether it was flushed.

        ``fence`` (a lease's) runs in the batch's transaction before the insert: when it fails,
        nothing is written and :class:`LeaseLostError` is raised.

        Raises:
            NotSent: the connection broke before any commit went out (safe to retry).
            Unknown: the connection broke after the commit was sent (see :meth:`read_tail`).
            OwnerExpired: this owner was declared dead; nothing was written.
            LeaseLostError: the fence failed; nothing was written.
            psycopg.Error: anything else (the transaction is rolled back when the connection lives).
        """
        done = self.try_known_tail(conn, groups, flush, fence)
        return self.read_tail(conn, groups, flush, None, fence) if done is None else done

    def try_known_tail(
        self,
        conn: PgConnection,
        groups: Sequence[Sequence[Entry]],
        flush: bool,
        fence: Composed | None = None,
    ) -> tuple[list[Outcome], bool] | None:
        """Commit ``groups`` in one message after the tail this writer left, if it knows one;
        ``None`` (nothing written) when it does not or another writer moved the tail since.

        Raises: as :meth:`write`.
        """
        if self.tail is None:
            return None
        try:
            return self._known_tail(conn, groups, self.tail, flush, fence)
        except _TailMoved:
            self.tail = None
            return None

    @property
    def mine(self) -> Tail:
        """The stored tail after this writer's last batch (its next batch is stored after it)."""
        return self._mine

    def note_batch(self, before: Tail, after: Tail) -> None:
        """A batch of this writer continued the stored tail ``before`` and left ``after``: the
        one-message path is tried again once :data:`CALM_BATCHES` in a row found the tail where
        this writer had left it."""
        self._calm = self._calm + 1 if before == self._mine else 0
        self.tail = after if self._calm >= CALM_BATCHES else None
        self._mine = after

    def _known_tail(
        self,
        conn: PgConnection,
        groups: Sequence[Sequence[Entry]],
        tail: Tail,
        flush: bool,
        fence: Composed | None,
    ) -> tuple[list[Outcome], bool]:
        from psycopg import sql

        sealed = Sealed(self._chain, groups, tail)
        if not sealed.rows:
            return sealed.outcomes, False
        if fence is None:
            # One statement: the server function fences, locks, checks the tail and inserts;
            # the implicit transaction's commit waits for the flush when ``flush`` (the lock is
            # held across it, which costs only writers that arrive meanwhile).
            if self._put is None:
                self._put = self._q["put"].as_bytes(conn)
            call = f"{'true' if flush else 'false'},{tail[0]},{_digest(tail[1])},{sealed.arrays()})"
            _send(conn, self._put + call.encode(), sealed)
            self.tail = self._mine = sealed.last
            return sealed.outcomes, flush
        check: Composed | sql.SQL = sql.SQL(
            "SELECT {s}.agent_saga_expect(coalesce((SELECT seq = {n} AND hash = {h}"
            " FROM {s}.records ORDER BY seq DESC LIMIT 1), {n} = 0), {moved})"
        ).format(
            s=self._s, n=sql.Literal(tail[0]), h=sql.Literal(tail[1]), moved=sql.Literal(_MOVED)
        )
        opening = self._q["open_durable" if flush else "open"]
        insert = self._q["insert"] + sql.SQL(sealed.values() + "; COMMIT")
        parts = [opening, check, fence, insert]
        _send(conn, sql.SQL("; ").join(parts), sealed)
        self.tail = self._mine = sealed.last
        return sealed.outcomes, flush

    def read_tail(
        self,
        conn: PgConnection,
        groups: Sequence[Sequence[Entry]],
        flush: bool,
        unknown: Sealed | None,
        fence: Composed | None = None,
    ) -> tuple[list[Outcome], bool]:
        """Commit ``groups`` in two round trips, reading the tail under the lock first.

        ``fence`` runs in the second message, before the insert.

        With ``unknown`` (a batch whose commit is :class:`Unknown`), the stored record at its
        first ``seq`` is read too: when it is that batch's, the batch did commit, nothing more is
        written and its outcomes are returned unflushed. Otherwise it did not, and never will:
        its message checks under the lock that the tail is where it was, and this batch moves it.

        Raises: as :meth:`write`.
        """
        from psycopg import sql

        parts = [self._q["open"], self._q["tail"]]
        look_for = unknown.first if unknown is not None else None
        if look_for is not None:
            parts.append(
                sql.SQL("SELECT hash FROM {s}.records WHERE seq = {n}").format(
                    s=self._s, n=sql.Literal(look_for.seq)
                )
            )
        cursor = _send(conn, sql.SQL("; ").join(parts), None)
        for _ in range(4):  # BEGIN, SET, the fence, the lock: then the tail
            cursor.nextset()
        row = cursor.fetchone()
        stored: Tail = (int(row[0]), str(row[1])) if row else (0, GENESIS)
        found = cursor.fetchone() if look_for is not None and cursor.nextset() else None
        if unknown is not None and look_for is not None and found and found[0] == look_for.hash:
            _send(conn, self._q["rollback"], None)
            self.tail = None
            return unknown.outcomes, False
        sealed = Sealed(self._chain, groups, stored)
        if not sealed.rows:
            _send(conn, self._q["rollback"], None)
            return sealed.outcomes, False
        cursor = _send(conn, self._insert(sealed, flush, fence), sealed)
        self.note_batch(stored, sealed.last)
        return sealed.outcomes, _flushed(cursor, flush)

    def retry(
        self,
        conn: PgConnection,
        groups: Sequence[Sequence[Entry]],
        flush: bool,
        unknown: Unknown | None,
        fence: Composed | None = None,
    ) -> tuple[list[Outcome], bool]:
        """Write ``groups`` on a new connection after the last one broke (``unknown``: its
        message held a commit); see :meth:`read_tail`."""
        sealed = unknown.sealed if unknown is not None else None
        if sealed is not None and not isinstance(sealed, Sealed):
            raise TypeError("not a batch of this writer")
        return self.read_tail(conn, groups, flush, sealed, fence)

    def _insert(self, sealed: Sealed, flush: bool, fence: Composed | None) -> Composed:
        from psycopg import sql

        statement = self._q["insert"] + sql.SQL(sealed.values() + "; COMMIT")
        if fence is not None:
            statement = fence + sql.SQL("; ") + statement
        return statement + self._q["flush"] if flush else statement


def _send(
    conn: PgConnection, message: Composed | bytes, commits: object | None
) -> Cursor[TupleRow]:
    """Run one message; ``commits`` is the batch whose commit the message holds, if any."""
    import psycopg

    try:
        return conn.execute(message, prepare=False)
    except psycopg.Error as exc:
        if conn.broken:
            if commits is not None:
                raise Unknown(str(exc), commits) from exc
            if isinstance(exc, psycopg.OperationalError):
                raise NotSent(str(exc)) from exc
            raise
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.execute("ROLLBACK")
        if exc.sqlstate == EXPECT_FAILED:
            reason = exc.diag.message_primary or ""
            if reason == _MOVED:
                raise _TailMoved(reason) from exc
            if reason.startswith(LEASE_LOST):
                name = reason.removeprefix(LEASE_LOST)
                raise LeaseLostError(
                    f"lease {name!r} expired or was taken over; nothing was written"
                ) from exc
            raise OwnerExpired(f"owner expired ({reason}); reopen the store") from exc
        raise


def _flushed(cursor: Cursor[TupleRow], flush: bool) -> bool:
    """Whether the message's owner refresh (its last statement) committed, so flushed the WAL."""
    if not flush:
        return False
    while cursor.nextset():
        pass
    if cursor.rowcount != 1:
        raise OwnerExpired("owner expired after the batch committed; reopen the store")
    return True
