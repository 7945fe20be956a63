"""One batch of records into the PostgreSQL log: two round trips, one transaction.

The first message opens the transaction, fences this owner (a share lock on its row, gone once
another host declared it dead), takes the log's advisory lock and reads the tail; the second
inserts the sealed batch and commits. Statements travel as literals in the simple protocol,
several to a message, each with its own snapshot, so the tail is read after the lock is granted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from .._log.chain import Chain
from .._log.records import GENESIS, Entry, Record
from .connection import OwnerExpired

if TYPE_CHECKING:
    from psycopg.sql import Composed

    from .connection import PgConnection


class NotSent(Exception):
    """The connection broke before the commit was sent: nothing from the batch was written."""


def insert_batch(
    conn: PgConnection,
    q: Mapping[str, Composed],
    chain: Chain,
    owner_id: str,
    entries: Sequence[Entry],
) -> list[Record]:
    """Seal ``entries`` after the stored tail and commit them; returns the sealed records.

    Raises:
        NotSent: the connection broke before the commit went out (safe to retry).
        OwnerExpired: this owner was declared dead; nothing was written.
        psycopg.Error: anything else (the transaction is rolled back when the connection lives).
    """
    import psycopg
    from psycopg import sql

    out: list[Record] = []
    committing = False
    try:
        cursor = conn.execute(q["begin"], prepare=False)
        fenced = [cursor.rowcount]
        while cursor.nextset():
            fenced.append(cursor.rowcount)
        tail = cursor.fetchone()
        if fenced[2] != 1:  # BEGIN, SET, the owner row, the lock, the tail
            raise OwnerExpired(f"owner {owner_id} expired; reopen the store")
        seq, prev = (int(tail[0]), str(tail[1])) if tail else (0, GENESIS)
        rows: list[sql.Composable] = []
        for entry in entries:
            seq += 1
            record, line = chain.seal(entry, seq, prev)
            out.append(record)
            values = (seq, record.hash, line[:-1])
            rows.append(sql.SQL("({})").format(sql.SQL(", ").join(map(sql.Literal, values))))
            prev = record.hash
        if not rows:
            conn.execute("ROLLBACK")
            return out
        committing = True
        insert = q["insert"] + sql.SQL(", ").join(rows) + sql.SQL("; COMMIT")
        conn.execute(insert, prepare=False)
    except BaseException as exc:
        if conn.broken:
            if not committing and isinstance(exc, psycopg.OperationalError):
                raise NotSent(str(exc)) from exc
        elif conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.execute("ROLLBACK")
        raise
    return out
