"""The saga index checked against the log during a full pass (``verify``): every row of its
``records`` table and every column of its ``sagas`` table, as far as it covers the log.

Reads through the index verify the records they read and the line of each saga they read
(:meth:`.sagaindex.SagaIndex.saga_records`); what they cannot see is a saga left out of the
index altogether, or a line edited so a filter passes over it. A full pass reads every record
anyway, so it also derives what the index must hold and compares:

* each record that belongs to a saga has its row (``seq``, saga, own or settling, length, the
  hash before it and its hash), and no other record has one;
* each saga's line: its key, its first record and when it began (matched to the record at its
  ``first_seq``), its first ``saga.begin`` and first ``saga.end`` (matched to those records),
  the status of its latest ``saga.end``, and its count and last ``seq`` (compared in SQL with
  the rows just checked); no line without rows, no rows without a line.

Invariants:

* Bounded memory: the index is read by cursors in ``seq`` order, merged with the pass; the
  only state kept per saga is for a saga whose latest ``saga.end`` read so far states another
  status than its line (none, in an index built from this log).
* Read-only, one snapshot: a read transaction on a read-only connection; nothing is written.
* Only what the index covers is compared: records up to its point. If the index moved past
  the pass's last record meanwhile (a writer appended and indexed), lines are not compared
  (their counts cover records the pass did not read) and :attr:`IndexAudit.checked` says so.
  Differences are only reported after a pass whose every record verified.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .indexpoint import read_point
from .indexwalk import IndexedRecord, line_fields
from .records import Kind
from .sagarows import belongs_to, id_key

_LINES_AGREE = (
    "SELECT s.id FROM sagas s LEFT JOIN (SELECT saga, count(*) AS n, min(seq) AS f, "
    "max(seq) AS l FROM records WHERE own = 1 GROUP BY saga) r ON r.saga = s.id "
    "WHERE r.saga IS NULL OR r.n != s.n OR r.f != s.first_seq OR r.l != s.last_seq LIMIT 1"
)
_PAST_THE_POINT = (
    "SELECT saga FROM records WHERE seq > ? UNION ALL "
    "SELECT id FROM sagas WHERE first_seq > ? OR last_seq > ? LIMIT 1"
)
_ROWS_WITHOUT_LINE = (
    "SELECT saga FROM records WHERE own = 1 AND saga NOT IN (SELECT id FROM sagas) LIMIT 1"
)


class IndexAudit:
    """One comparison of the index at ``path`` with a full pass over its log: call
    :meth:`see` with each record's stored line in order, then :meth:`finish`."""

    def __init__(self, path: Path) -> None:
        """Open the index at ``path`` read-only, in one read transaction.

        Raises:
            sqlite3.Error: it cannot be read (missing, or not an index).
        """
        self._db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
        try:
            self._db.execute("BEGIN")
            covered = read_point(self._db).seq
        except BaseException:
            self._db.close()
            raise
        self.covered = covered
        self.seq = 0
        self._prev = b""
        self.problem: str | None = None
        self.checked = "not yet"
        self._rows = self._cursor(
            "SELECT seq, saga, own, len, prev, hash FROM records WHERE seq <= ? ORDER BY seq",
            covered,
        )
        self._firsts = self._cursor(
            "SELECT first_seq, id, key, started FROM sagas WHERE first_seq <= ? "
            "ORDER BY first_seq", covered,
        )  # fmt: skip
        self._begins = self._cursor(
            "SELECT began, id FROM sagas WHERE began <= ? ORDER BY began", covered
        )
        self._ends = self._cursor(
            "SELECT ended, id, end_status FROM sagas WHERE ended <= ? ORDER BY ended", covered
        )
        self._differing: dict[str, str] = {}
        """Sagas whose latest ``saga.end`` so far states another status than their line."""

    def _cursor(self, sql: str, *args: object) -> _Merged:
        return _Merged(self._db.execute(sql, args))

    def see(self, line: bytes, prev: bytes) -> None:
        """The next record of the pass, as stored (no newline), and the hash before it."""
        self.seq += 1
        if self.problem is not None or self.seq > self.covered:
            return
        record = line_fields(line, self.seq, prev)
        if isinstance(record, str):  # not in the form the index reads: it was built otherwise
            self.problem = f"record {self.seq} cannot be read as the index reads it: {record}"
            return
        self.problem = self._row(record) or self._line(record)

    def _row(self, record: IndexedRecord) -> str | None:
        seq = record.seq
        target, own = belongs_to(record)
        row = self._rows.take(seq)
        if target is None:
            return None if row is None else f"the index has a row for record {seq}, of no saga"
        expected = (seq, target, own, record.length, bytes.fromhex(record.prev))
        if row is None:
            return f"record {seq} of saga {target} has no row in the index"
        if tuple(row[:5]) != expected or row[5] != bytes.fromhex(record.hash):
            return f"the index's row for record {seq} is not that record's (saga {target})"
        return None

    def _line(self, record: IndexedRecord) -> str | None:
        seq, saga = record.seq, record.saga
        for cursor in (self._firsts, self._begins, self._ends):
            behind = cursor.behind(seq)
            if behind is not None:
                return f"the line of saga {behind[1]} names record {behind[0]}, not one of its own"
        first = self._firsts.take(seq)
        if first is not None and (tuple(first[1:]) != (saga, id_key(str(saga)), record.ts)):
            return f"the line of saga {first[1]} does not match its first record {seq}"
        if saga is None:
            return None
        if record.kind == Kind.SAGA_BEGIN:
            began = self._begins.take(seq)
            if (began[1] if began else self._stated(saga, "began", seq)) != saga:
                return f"the line of saga {saga} does not name its saga.begin at record {seq}"
        if record.kind == Kind.SAGA_END:
            ended = self._ends.take(seq)
            if ended is not None and ended[1] != saga:
                return f"the line of saga {ended[1]} names record {seq} as its saga.end"
            if ended is None and self._stated(saga, "ended", seq) != saga:
                return f"the line of saga {saga} does not name its saga.end at record {seq}"
            status = record.data.get("status")
            stated = ended[2] if ended is not None else self._status_of(saga)
            if (status if isinstance(status, str) else "?") != stated:
                self._differing[saga] = str(status)
            else:
                self._differing.pop(saga, None)
        return None

    def _stated(self, saga: str, column: str, seq: int) -> str | None:
        """``saga`` when its line names a record before ``seq`` in ``column`` (a later
        ``saga.begin`` or ``saga.end`` than its first), else ``None``."""
        row = self._db.execute(
            f"SELECT {column} FROM sagas WHERE id = ?",  # noqa: S608 - a fixed column name
            (saga,),
        ).fetchone()
        return saga if row is not None and isinstance(row[0], int) and row[0] < seq else None

    def _status_of(self, saga: str) -> object:
        row = self._db.execute("SELECT end_status FROM sagas WHERE id = ?", (saga,)).fetchone()
        return None if row is None else row[0]

    def finish(self) -> str | None:
        """Why the index does not describe the log, or ``None``; closes the connection."""
        try:
            if self.problem is None and self.seq < self.covered:
                self.checked = (
                    f"not compared: it covers {self.covered} records, the pass read {self.seq} "
                    "(written since, or cut from the log: readers then rebuild it)"
                )
                return None
            for cursor in (self._rows, self._firsts, self._begins, self._ends):
                left = cursor.behind(self.covered + 1)
                if self.problem is None and left is not None:
                    self.problem = f"the index has a row for record {left[0]}, past the log"
            if self.problem is None and self._differing:
                saga = next(iter(self._differing))
                self.problem = f"the line of saga {saga} does not state its latest status"
            for sql in (_PAST_THE_POINT, _LINES_AGREE, _ROWS_WITHOUT_LINE):
                found = None if self.problem else self._db.execute(sql, _args(sql, self.covered))
                row = None if found is None else found.fetchone()
                if row is not None:
                    self.problem = f"the line of saga {row[0]} does not match its rows"
            self.checked = f"agrees with the log (every row and line, up to record {self.covered})"
            return self.problem
        finally:
            self._db.close()


def _args(sql: str, covered: int) -> tuple[int, ...]:
    return (covered,) * sql.count("?")


class _Merged:
    """A cursor read in step with the pass: its rows are ordered by their first column."""

    def __init__(self, rows: Iterator[Any]) -> None:
        self._rows = rows
        self._head: tuple[Any, ...] | None = next(rows, None)

    def take(self, seq: int) -> tuple[Any, ...] | None:
        """The head row when it is for ``seq`` (then the next becomes the head), else ``None``."""
        head = self._head
        if head is None or head[0] != seq:
            return None
        self._head = next(self._rows, None)
        return head

    def behind(self, seq: int) -> tuple[Any, ...] | None:
        """The head row when it is for a record before ``seq`` (one the pass went past)."""
        head = self._head
        return head if head is not None and head[0] < seq else None
