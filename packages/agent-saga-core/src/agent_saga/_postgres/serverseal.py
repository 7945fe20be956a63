"""Batches sealed on the server: the log's lock is held only while the server runs one message.

For a plain (unkeyed) chain the hash of a record is SHA-256 over bytes the server can put
together itself, so the writer sends each entry's encoded parts (``Chain.prepare``: the data as
hashed and as stored, its salts, its kind and saga as JSON) and the server function
``agent_saga_seal_v2`` (``schema``) reads the tail under the lock, seals and inserts them. One
statement per batch: the procedure ``agent_saga_seal_call_v2`` fences the owner, takes the log's
lock and calls it in a transaction it commits without waiting for the flush, then (for a durable
batch) refreshes the owner's heartbeat in a second transaction that the ``CALL`` commits
synchronously; its one row says what the batch continued and whether the heartbeat ran::

    CALL agent_saga_seal_call_v2(<owner>, <lock>, <ttl>, <durable>, ...)

A batch fenced by a lease, or settled after a broken connection, sends the same steps as
separate statements (``BEGIN; SET LOCAL synchronous_commit = off; <owner fence>; <log lock>;
<lease fence>; SELECT * FROM agent_saga_seal_v2(...); COMMIT; UPDATE <this owner's row> ...``).

The lock is granted and released while the server runs it, never across a round trip to the
client or a WAL flush: the batch commits without waiting for the flush, and a durable batch's
statement ends with the owner's heartbeat committed synchronously (a transaction with an xid
whose commit record follows the batch's in the WAL, so it returns only once the WAL is flushed
past the batch; a heartbeat that found the owner expired assigns no xid, waits for nothing and
fails the store). The flush waits of every process run side by side, so the server's group commit
shares one fsync among them. The function returns the tail it continued and the last hash; the
writer re-seals the records locally from that tail (the records it acknowledges) and fails the
store unless the server's last hash and lines match its own, or when the tail the server
continued is this writer's last record with another hash (records stored otherwise than it
acknowledged them). These checks catch a function that seals otherwise (another version, a
bug) and one that stores other records than it reports, from the writer's next batch when no
other writer came between; they cannot stop a schema writer who rewrites an unkeyed log and
lies consistently: a chain key (sealed by the process) and signed checkpoints do.

A keyed chain (HMAC) cannot be sealed there without sending the key, so it keeps ``write``'s
paths.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from .._log.chain import MAX_RECORD_BYTES, Chain
from .._log.codec import CodecError
from .._log.forms import Prepared, prepare
from .._log.records import GENESIS, Entry, Record
from .owners import OwnerExpired
from .schema import SEAL
from .write import BatchWriter, Outcome, Tail, Unknown, _flushed, _send, _text

if TYPE_CHECKING:
    from psycopg import Cursor
    from psycopg.rows import TupleRow
    from psycopg.sql import Composed

    from .connection import PgConnection

_FIXED = len(b'{"data":,"hash":"","kind":,"prev":"","saga":,"seq":,"ts":,"v":2}') + 2 * 64 + 20
"""A record's bytes besides its data, kind, saga, salts and ts, with the longest ``seq``."""


class SealMismatch(Exception):
    """The server sealed a batch otherwise than this writer would have: the store must fail."""


class PreparedBatch:
    """Groups of entries encoded for the server; a group that cannot be is refused alone.

    Attributes:
        groups: each group's prepared entries, or why it could not be encoded.
        pid: the server process of the connection the batch was sent on.
    """

    def __init__(self, groups: Sequence[Sequence[Entry]]) -> None:
        self.groups: list[list[Prepared] | CodecError] = []
        self.parts: list[Prepared] = []
        self.pid = 0
        for group in groups:
            try:
                prepared = [_fits(prepare(entry)) for entry in group]
            except CodecError as exc:
                self.groups.append(exc)
                continue
            self.groups.append(prepared)
            self.parts.extend(prepared)

    def call(self, function: Composed) -> Composed:
        """``SELECT * FROM <function>(...)`` with this batch's parts as literals."""
        from psycopg import sql

        return function + sql.SQL(self.arrays() + ")")

    def arrays(self) -> str:
        """This batch's parts as literal arrays, the arguments of ``schema.SEAL``."""
        parts = self.parts
        arrays = [
            _bytea(p.hashed for p in parts),
            _bytea(None if p.salts is None else p.data for p in parts),
            _bytea(p.kind for p in parts),
            _bytea(p.saga for p in parts),
            _bytea(
                None if p.salts is None else b',"salts":"' + p.salts.encode() + b'"' for p in parts
            ),
            "ARRAY[" + ",".join(str(int(p.entry.ts)) for p in parts) + "]::bigint[]",
            _texts(p.entry.saga for p in parts),
            _texts(p.entry.kind for p in parts),
        ]
        return ", ".join(arrays)

    def place(self, chain: Chain, tail: Tail) -> tuple[list[Outcome], list[bytes], Tail]:
        """Seal the batch after ``tail`` here: each group's outcome, the stored lines (without
        ``\\n``) and the tail after the batch."""
        seq, prev = tail
        outcomes: list[Outcome] = []
        lines: list[bytes] = []
        for group in self.groups:
            if isinstance(group, CodecError):
                outcomes.append(group)
                continue
            records: list[Record] = []
            for parts in group:
                seq += 1
                record, line = chain.place(parts, seq, prev)
                records.append(record)
                lines.append(line[:-1])
                prev = record.hash
            outcomes.append(records)
        return outcomes, lines, (seq, prev)


def _fits(parts: Prepared) -> Prepared:
    """``parts`` unless its record could exceed :data:`MAX_RECORD_BYTES` (whatever its ``seq``:
    the server seals it, so the check is made before, at most 18 bytes stricter than on the file
    store)."""
    size = _FIXED + len(parts.data) + len(parts.kind) + len(parts.saga)
    size += len(str(parts.entry.ts)) + (0 if parts.salts is None else len(parts.salts) + 11)
    if size > MAX_RECORD_BYTES:
        raise CodecError(f"record of up to {size} bytes exceeds {MAX_RECORD_BYTES}")
    return parts


def _bytea(values: Iterable[bytes | None]) -> str:
    items = ["NULL" if v is None else f"decode('{v.hex()}','hex')" for v in values]
    return "ARRAY[" + ",".join(items) + "]::bytea[]"


def _texts(values: Iterable[str | None]) -> str:
    items = ["NULL" if v is None else _text(v) for v in values]
    return "ARRAY[" + ",".join(items) + "]::text[]"


class ServerSealWriter:
    """Writes batches of an unkeyed chain sealed on the server (one message each).

    Not thread-safe: one leader at a time (see ``commit``).

    Args:
        q: the store's statements (``sql.queries``).
        schema: the schema holding the log.
        chain: re-seals the records locally (it must be unkeyed).
        tail: the stored tail when the store opened.
    """

    def __init__(self, q: Mapping[str, Composed], schema: str, chain: Chain, tail: Tail) -> None:
        from psycopg import sql

        if chain.keyed:
            raise ValueError("a keyed chain cannot be sealed on the server")
        self._q, self._chain = q, chain
        self._s = sql.Identifier(schema)
        self._call = sql.SQL("SELECT * FROM {s}.{f}(").format(s=self._s, f=sql.Identifier(SEAL))
        self._seal_call: bytes | None = None
        """The start of a ``schema.SEAL_CALL`` call, rendered once."""
        self._known = BatchWriter(q, schema, chain, tail)
        """Seals here after the tail it left, while no other writer moves it (one message whose
        commit waits for the flush: the lock is held across it only while nobody else waits)."""

    def write(
        self,
        conn: PgConnection,
        groups: Sequence[Sequence[Entry]],
        flush: bool,
        fence: Composed | None = None,
    ) -> tuple[list[Outcome], bool]:
        """Commit ``groups`` as one batch; returns each group's outcome and whether it was flushed.

        Raises: as ``BatchWriter.write``, and :class:`SealMismatch` (the batch committed, but
            not as this writer sealed it).
        """
        done = self._known.try_known_tail(conn, groups, flush, fence)
        if done is not None:
            return done
        return self._send_batch(conn, PreparedBatch(groups), flush, fence, None)

    def retry(
        self,
        conn: PgConnection,
        groups: Sequence[Sequence[Entry]],
        flush: bool,
        unknown: Unknown | None,
        fence: Composed | None = None,
    ) -> tuple[list[Outcome], bool]:
        """Write ``groups`` on a new connection after the last one broke.

        With ``unknown`` (its message held a commit), that batch is settled first: its server
        process is ended and waited for (so the batch cannot commit later), then the records
        after this writer's last batch are read under the log's lock. When the batch is among
        them its outcomes are returned unflushed; otherwise it is written again in the same
        transaction.

        Raises: as :meth:`write`.
        """
        if unknown is None:
            return self.write(conn, groups, flush, fence)
        batch = unknown.sealed
        if not isinstance(batch, PreparedBatch):  # sent on the one-message path
            return self._known.retry(conn, groups, flush, unknown, fence)
        conn.execute(
            "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity"
            " WHERE pid = %s AND usename = current_user AND application_name = 'agent-saga'",
            (batch.pid,),
        )
        return self._send_batch(conn, batch, flush, fence, self._known.mine)

    def _send_batch(
        self,
        conn: PgConnection,
        batch: PreparedBatch,
        flush: bool,
        fence: Composed | None,
        settle_after: Tail | None,
    ) -> tuple[list[Outcome], bool]:
        from psycopg import sql

        if not batch.parts:
            return [g if isinstance(g, CodecError) else [] for g in batch.groups], False
        message: Composed | bytes
        call = settle_after is None and fence is None
        if call:
            # One statement fences, locks, seals and inserts (committed without waiting for
            # the flush), then the heartbeat's synchronous commit flushes past it.
            if self._seal_call is None:
                self._seal_call = self._q["seal_call"].as_bytes(conn)
            durable = "true, " if flush else "false, "
            message = self._seal_call + (durable + batch.arrays() + ")").encode()
        else:
            opening: list[Composed | sql.SQL] = [self._q["open"]]
            if settle_after is not None:
                found = self._find(conn, batch, settle_after)
                if found is not None:
                    _send(conn, self._q["rollback"], None)
                    return found, False
                opening = []
            if fence is not None:
                opening.append(fence)
            parts = [*opening, batch.call(self._call), sql.SQL("COMMIT")]
            message = sql.SQL("; ").join(parts)
            if flush:
                message += self._q["flush"]
        batch.pid = conn.info.backend_pid
        cursor = _send(conn, message, batch)
        row = cursor.fetchone() if call else _seal_row(cursor)  # a CALL has one result
        if row is None:
            raise SealMismatch("the server returned no sealed batch")
        before = (int(row[0]), str(row[1]))
        mine = self._known.mine
        if settle_after is None and before[0] == mine[0] and before[1] != mine[1]:
            raise SealMismatch(
                f"record {mine[0]} is stored otherwise than this writer acknowledged it "
                f"(hash {before[1][:16]}..., not {mine[1][:16]}...)"
            )
        outcomes, lines, last = batch.place(self._chain, before)
        if last[1] != row[2] or hashlib.sha256(b"\n".join(lines)).hexdigest() != row[3]:
            raise SealMismatch(f"the server sealed records {row[0] + 1}-{last[0]} otherwise")
        self._known.note_batch(before, last)
        if not call:
            return outcomes, _flushed(cursor, flush)
        if flush and row[4] != 1:
            raise OwnerExpired("owner expired after the batch committed; reopen the store")
        return outcomes, flush

    def _find(self, conn: PgConnection, batch: PreparedBatch, after: Tail) -> list[Outcome] | None:
        """Open a transaction holding the log's lock (left open) and look for ``batch`` among
        the records after ``after``: its outcomes if stored there.

        A batch is stored after the tail its writer left, in the WAL too: when that record is
        gone (a server crash lost it), so is the batch."""
        from psycopg import sql

        rows = sql.SQL("SELECT seq, hash, line FROM {s}.records WHERE seq >= {n} ORDER BY seq")
        query = self._q["open"] + sql.SQL("; ") + rows.format(s=self._s, n=sql.Literal(after[0]))
        cursor = _send(conn, query, None)
        while cursor.nextset():
            pass
        stored = [(int(r[0]), str(r[1]), bytes(r[2])) for r in cursor.fetchall()]
        if after[0] == 0:
            start, prev = 0, GENESIS
        elif stored and stored[0][:2] == after:
            start, prev = 1, after[1]
        else:
            return None
        head = b'{"data":' + batch.parts[0].data
        for i in range(start, len(stored)):
            seq, digest, line = stored[i]
            if line.startswith(head):
                outcomes, lines, last = batch.place(self._chain, (seq - 1, prev))
                if [row[2] for row in stored[i : i + len(lines)]] == lines:
                    self._known.note_batch((seq - 1, prev), last)
                    return outcomes
            prev = digest
        return None


def _seal_row(cursor: Cursor[TupleRow]) -> TupleRow | None:
    """The seal function's row: the results before it (the opening statements) are skipped."""
    while True:
        description = cursor.description
        if description is not None and description[0].name == "tail_seq":
            return cursor.fetchone()
        if not cursor.nextset():
            return None


__all__ = ["PreparedBatch", "SealMismatch", "ServerSealWriter"]
