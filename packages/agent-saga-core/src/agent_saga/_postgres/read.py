"""Reading the PostgreSQL log back: rows page by page, each checked against the chain.

A row's ``seq`` must be the next one (a deleted row is found), its line must fit the chain, and
its ``hash`` column must match the line's hash (a rewritten column is found).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from .._errors import CorruptLogError
from .._log.chain import Chain, ChainBreak, parse_line
from .._log.ledger import RedactionLedger
from .._log.records import GENESIS, Record

if TYPE_CHECKING:
    from psycopg.sql import Composed

    from .connection import PgConnection

PAGE = 1000


def paged_rows(
    query: Callable[[Any, tuple[int, int]], Sequence[tuple[Any, ...]]], statement: Any
) -> Iterator[tuple[int, str, bytes]]:
    """``(seq, hash, line)`` rows in ``seq`` order, :data:`PAGE` rows per query."""
    after = 0
    while True:
        rows = query(statement, (after, PAGE))
        for seq, digest, line in rows:
            yield int(seq), str(digest), bytes(line)
        if len(rows) < PAGE:
            return
        after = int(rows[-1][0])


def checked_records(
    rows: Iterator[tuple[int, str, bytes]], chain: Chain, where: str
) -> Iterator[Record]:
    """The records of ``rows``, verified while read.

    Raises:
        CorruptLogError: at the first row that is missing, off the chain or mislabelled, or
            whose masked values no signed redaction record accounts for (see ``_log.ledger``).
    """
    prev, expect = GENESIS, 1
    ledger = RedactionLedger()
    for seq, digest, line in rows:
        index = expect - 1
        if seq != expect:
            reason = f"row seq {seq} where {expect} was expected (a record is missing)"
            raise CorruptLogError(where, index, reason, seq=expect)
        result = parse_line(chain, line, expect, prev)
        if isinstance(result, ChainBreak):
            raise CorruptLogError(where, index, result.reason, seq=expect)
        if digest != result.hash:
            raise CorruptLogError(where, index, "hash column does not match the record", expect)
        problem = ledger.see(result, index)
        if problem is not None:
            raise CorruptLogError(where, index, problem, seq=expect)
        yield result
        prev, expect = result.hash, expect + 1
    unjustified = ledger.first_unjustified()
    if unjustified is not None:
        raise CorruptLogError(where, unjustified[1], unjustified[2], seq=unjustified[0])


def check_tail(conn: PgConnection, last: Composed, chain: Chain, where: str) -> None:
    """Check the stored tail row (query ``last``) is a well-formed record of the chain.

    Raises:
        CorruptLogError: the line does not parse, is off its own ``prev``, or its ``hash``
            column does not match it.
    """
    row = conn.execute(last).fetchone()
    if row is None:
        return
    seq, digest, line = int(row[0]), str(row[1]), bytes(row[2])
    result = parse_line(chain, line, seq, _prev_field(line))
    if isinstance(result, ChainBreak):
        reason = result.reason
    elif digest != result.hash:
        reason = "hash column does not match the record"
    else:
        return
    raise CorruptLogError(where, seq - 1, f"stored tail: {reason}", seq=seq)


def _prev_field(line: bytes) -> str:
    """The ``prev`` a stored line claims (checked by hash, not trusted)."""
    marker = line.find(b'"prev":"')
    return line[marker + 8 : marker + 72].decode("ascii", "replace") if marker >= 0 else ""
