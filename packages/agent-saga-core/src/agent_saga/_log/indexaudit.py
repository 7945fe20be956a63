"""The saga index checked against the log during a full pass (``verify``): every row of its
``records`` table and every column of its ``sagas`` table, as far as it covers the log.

Reads through the index verify the records they read and the line of each saga they read
(:meth:`.sagaindex.SagaIndex.saga_records`); what they cannot see is a saga left out of the
index altogether, or a line edited so a filter passes over it. A full pass reads every record
anyway, so it also derives what the index must hold and compares:

* each saga's line: its key, its first record and when it began (matched to the record at its
  ``first_seq``), its first ``saga.begin`` and first ``saga.end`` (matched to those records),
  and the status of its latest ``saga.end``;
* the rows of the records a line names and of every ``saga.begin``, ``saga.end`` and
  ``saga.settled`` (``seq``, saga, own or settling), so a saga removed from both tables is
  found at its ``saga.begin`` or ``saga.end`` (a saga with neither, which only a hand-made log
  holds, is not), and one whose end or settlement was removed is found;
* in SQL, at the end, each line against the index's own rows (count, first and last ``seq``),
  no rows without a line, and nothing past the index's point.

A row of another record removed from the middle of a saga (its line's count lowered to match)
is not looked for here: a read of that saga finds it, since each record states its place in
its saga (:func:`.sagarows.check_places`). Nor are a row's place and hashes: a read verifies
the bytes they point at, and a wrong one only makes it rebuild the index. So most records cost
the pass a search of their line for a saga's kind, no more.

Invariants:

* Bounded memory: the index is read by cursors in ``seq`` order, merged with the pass; the
  only state kept per saga is for a saga whose latest ``saga.end`` read so far states another
  status than its line (none, in an index built from this log).
* Read-only, one snapshot: a read transaction on a read-only connection; nothing is written.
* Only what the index covers is compared: records up to its point. If the index moved past
  the pass's last record meanwhile (a writer appended and indexed), lines are not compared
  (their counts cover records the pass did not read) and :attr:`IndexAudit.checked` says so.
  Differences are only reported after a pass whose every record verified, and only when the
  record at the index's point is the pass's (an index built from another log, or whose point
  was edited, is not compared: every reader checks that record first and rebuilds it). An
  index SQLite cannot read is a difference, never an exception.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .indexpoint import read_point
from .indexwalk import IndexedRecord, kind_and_saga, line_fields
from .records import Kind
from .sagarows import id_key, settles

_LINES_AGREE = (
    "SELECT s.id FROM sagas s LEFT JOIN (SELECT saga, count(*) AS n, min(seq) AS f, "
    "max(seq) AS l FROM records WHERE own = 1 GROUP BY saga) r ON r.saga = s.id "
    "WHERE r.saga IS NULL OR r.n != s.n OR r.f != s.first_seq OR r.l != s.last_seq LIMIT 1"
)
_PAST_THE_POINT = (
    "SELECT saga FROM records WHERE seq > ? UNION ALL SELECT id FROM sagas WHERE "
    "first_seq > ? OR last_seq > ? OR began > ? OR ended > ? LIMIT 1"
)
_UNENDED_WITH_STATUS = "SELECT id FROM sagas WHERE (end_status IS NULL) != (ended IS NULL) LIMIT 1"
"""A line with a status and no ``saga.end``, or the other way round (a saga's ``saga.end``
records are each matched to its line during the pass)."""
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
            point = read_point(self._db)
            covered = point.seq
        except BaseException:
            self._db.close()
            raise
        self.covered = covered
        self._point = point
        self._hash_at = point.hash if covered == 0 else ""
        """The hash of the pass's record at the index's point (to tell a stale index)."""
        self.seq = 0
        self.problem: str | None = None
        self.checked = "not yet"
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
        """The next record of the pass, as stored (no newline), and the hash before it.

        Most records cost a few comparisons and a search of their line for a saga's kind; a
        record a line names, a ``saga.begin``, a ``saga.end`` and a ``saga.settled`` are read
        in full and their rows looked up."""
        self.seq += 1
        seq = self.seq
        if seq == self.covered:
            cut = line.rfind(b',"hash":"') + 9
            self._hash_at = line[cut : cut + 64].decode("ascii", "replace")
        if self.problem is not None or seq > self.covered:
            return
        named = seq in (self._firsts.at, self._begins.at, self._ends.at)
        if named or _SAGA_KIND in line:
            try:
                self.problem = self._read(seq, line, prev, named)
            except (sqlite3.Error, ValueError) as exc:
                self.problem = f"the index cannot be read at record {seq}: {exc}"

    def _read(self, seq: int, line: bytes, prev: bytes, named: bool) -> str | None:
        fields = kind_and_saga(line)
        if fields is None:  # not in the form the index reads: it was built otherwise
            return f"record {seq} cannot be read as the index reads it"
        kind, saga = fields
        if kind not in _READ_KINDS and not named:
            return None  # "saga." was in its data, or it suspends or resumes its saga
        target, own = saga, 1
        if saga is None:
            target, own = None, 0
            if kind == Kind.SETTLED:
                target = settles(self._full(line, seq, prev))
        row = self._db.execute("SELECT saga, own FROM records WHERE seq = ?", (seq,)).fetchone()
        if (None if row is None else tuple(row)) != (None if target is None else (target, own)):
            return f"the index's row for record {seq} is not that record's"
        if saga is not None:
            return self._line(seq, kind, saga, line, prev)
        return f"a line of the index names record {seq}, of no saga" if named else None

    def _full(self, line: bytes, seq: int, prev: bytes) -> IndexedRecord:
        record = line_fields(line, seq, prev)
        if isinstance(record, str):  # the pass verified it: cannot happen but for a bug
            raise ValueError(f"record {seq}: {record}")
        return record

    def _line(self, seq: int, kind: str, saga: str, line: bytes, prev: bytes) -> str | None:
        firsts, begins, ends = self._firsts, self._begins, self._ends
        if firsts.at < seq or begins.at < seq or ends.at < seq:
            for cursor in (firsts, begins, ends):
                behind = cursor.behind(seq)
                if behind is not None:
                    return f"the line of saga {behind[1]} names record {behind[0]}, not its own"
        first = firsts.take(seq) if firsts.at == seq else None
        if first is not None:
            stated = (saga, id_key(saga), _ts(line))
            if tuple(first[1:]) != stated:
                return f"the line of saga {first[1]} does not match its first record {seq}"
        if kind == Kind.SAGA_BEGIN:
            began = self._begins.take(seq)
            if (began[1] if began else self._stated(saga, "began", seq)) != saga:
                return f"the line of saga {saga} does not name its saga.begin at record {seq}"
        if kind == Kind.SAGA_END:
            ended = self._ends.take(seq)
            if ended is not None and ended[1] != saga:
                return f"the line of saga {ended[1]} names record {seq} as its saga.end"
            if ended is None and self._stated(saga, "ended", seq) != saga:
                return f"the line of saga {saga} does not name its saga.end at record {seq}"
            status = self._full(line, seq, prev).data.get("status")
            stated_status = ended[2] if ended is not None else self._status_of(saga)
            if (status if isinstance(status, str) else "?") != stated_status:
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
            if self.seq < self.covered or self._hash_at != self._point.hash:
                self.checked = (
                    f"not compared: it covers {self.covered} records, the pass read {self.seq} "
                    "(written since, or cut from the log: readers then rebuild it)"
                    if self.seq < self.covered
                    else f"not compared: it was built from another log (its record "
                    f"{self.covered} is not this log's; readers rebuild it)"
                )
                self.problem = None
                return None
            self._finish()
            return self.problem
        except sqlite3.Error as exc:
            self.problem = f"the index cannot be read: {exc}"
            return self.problem
        finally:
            self._db.close()

    def _finish(self) -> None:
        """The checks left once the pass is over (see the module docstring)."""
        for cursor in (self._firsts, self._begins, self._ends):
            left = cursor.behind(self.covered + 1)
            if self.problem is None and left is not None:
                self.problem = f"the index has a row for record {left[0]}, past the log"
        if self.problem is None and self._differing:
            saga = next(iter(self._differing))
            self.problem = f"the line of saga {saga} does not state its latest status"
        for sql in (_PAST_THE_POINT, _UNENDED_WITH_STATUS, _LINES_AGREE, _ROWS_WITHOUT_LINE):
            row = None if self.problem else self._db.execute(sql, _args(sql, self.covered))
            found = None if row is None else row.fetchone()
            if found is not None:
                self.problem = f"the line of saga {found[0]} does not match its rows"
        self.checked = f"agrees with the log (every row and line, up to record {self.covered})"


def _ts(line: bytes) -> int:
    """A stored record's ``ts``: the field before ``"v"`` at its end (no escape can hold an
    unquoted ``,"ts":``; the pass checked the line's canonical form)."""
    start = line.rindex(b',"ts":') + 6
    return int(line[start : line.index(b",", start)])


def _args(sql: str, covered: int) -> tuple[int, ...]:
    return (covered,) * sql.count("?")


_SAGA_KIND = b'"kind":"saga.'
"""In the line of every ``saga.*`` record (its ``kind`` field), and rarely in another's data."""
_READ_KINDS = frozenset({Kind.SAGA_BEGIN, Kind.SAGA_END, Kind.SETTLED})
_NONE_LEFT = 1 << 63


class _Merged:
    """A cursor read in step with the pass: its rows are ordered by their first column (a
    ``seq``), which :attr:`at` holds for the head row (a ``seq`` past any when none is left)."""

    def __init__(self, rows: Iterator[Any]) -> None:
        self._rows = rows
        self._head: tuple[Any, ...] | None = None
        self.at = 0
        self._advance()

    def _advance(self) -> None:
        head = self._head = next(self._rows, None)
        self.at = _NONE_LEFT if head is None else head[0]
        if type(self.at) is not int:  # an edited row: never matched, found as left behind
            self.at = -1

    def take(self, seq: int) -> tuple[Any, ...] | None:
        """The head row when it is for ``seq`` (then the next becomes the head), else ``None``."""
        if self.at != seq:
            return None
        head = self._head
        self._advance()
        return head

    def behind(self, seq: int) -> tuple[Any, ...] | None:
        """The head row when it is for a record before ``seq`` (one the pass went past)."""
        return self._head if self.at < seq else None
