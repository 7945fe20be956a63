"""The saga index of a home's file log: saga id -> where its records are, and which sagas are
unfinished, so a saga is read in time proportional to the saga, not to the log.

The index is ``<home>/index/sagas.sqlite3`` (SQLite, from the standard library: B-tree lookups
by saga id and by age, multi-process locking and a write-ahead journal that stays consistent
across a crash, without anything we would hand-roll). It holds, for every record that belongs
to a saga (or settles one), its ``seq``, segment, byte offset, length and the hash before it;
for every saga its first and last ``seq``, the time of its first record, its record count and
the status of its latest ``saga.end`` (none while unfinished); and the point of the log indexed
so far (segment, offset, ``seq``, hash).

Invariants:

* Derived data, never trusted over the log. Catching up starts by reading the record that
  ends at the indexed point and checking its ``seq`` and hash, then walks the log from there,
  verifying the chain; an index the log no longer continues (stale, from another log, or
  corrupt: any SQLite error) is wiped and rebuilt from the first record. A record read through
  the index is verified again (its bytes hash to a record at the ``seq`` and after the hash the
  index gives, of the saga asked for), and a saga read through it must have the record count
  and last ``seq`` the index states, each at the place it states (:func:`.sagarows.check_places`:
  a row deleted mid-saga is caught); any mismatch raises :class:`IndexMismatch`, after which
  callers rebuild the index and, failing that, read the log in full. Its unfinished sagas are
  believed only as far as a signed checkpoint's statement and the log after it agree with them
  (:mod:`.indexsets`: a whole unfinished saga left out of the index is caught).
* No fsync on a transaction's path. Commits use ``synchronous=NORMAL`` in WAL mode: after a
  power loss the index may lose its latest commits, never its consistency, and lagging is
  harmless because every use catches up from the log first. Checkpoints (which fsync) run only
  when a reader catches up, never from :meth:`SagaIndex.follow`, the writer's hook.
* The index only ever covers records before the log's end found under the readers' shared
  lock (a batch boundary), so it never holds a half-written batch.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .chain import Chain
from .files import LOG_NAME, OS, unlink_planted_links
from .indexer import BURST, BehindWriter
from .indexpoint import (
    INDEX_DIR,
    INDEX_NAME,
    VERSION,
    IndexMismatch,
    Place,
    Point,
    discard_index,
    read_at,
    read_places,
    read_point,
    save_point,
)
from .indexpoint import START as _START
from .indexwalk import walk_for_index
from .records import Record
from .sagarows import (
    KEYED_ROWS,
    PREFIX_END,
    SAGA_LINE,
    SCHEMA,
    TYPED_ROWS,
    UNFINISHED_NOW,
    check_line,
    check_places,
    chunk_rows,
    id_key,
    newest_query,
    settles,
)
from .unfinishedset import Statement

__all__ = ["INDEX_DIR", "INDEX_NAME", "IndexMismatch", "Point", "SagaIndex", "discard_index"]

_CHUNK = 20_000
"""Records indexed per SQLite transaction while catching up (bounds the journal)."""


_LIVE: weakref.WeakSet[SagaIndex] = weakref.WeakSet()
_INHERITED: list[sqlite3.Connection] = []
"""Connections a forked child inherited: kept open and unused for the child's life, since
closing one could let SQLite drop the journal the parent still writes."""


def _after_fork_in_child() -> None:
    """A child gets fresh thread locks (a parent's thread may have held one at the fork) and
    opens its own connections."""
    for index in list(_LIVE):
        index._lock = threading.Lock()
        if index._db is not None:
            _INHERITED.append(index._db)
            index._db = None


os.register_at_fork(after_in_child=_after_fork_in_child)


class SagaIndex:
    """The saga index of ``home``'s log (see the module docstring). Thread-safe; a process
    forked after using it opens its own connection."""

    def __init__(self, home: Path, chain: Chain) -> None:
        self.home, self.chain = home, chain
        self.path = home / INDEX_DIR / INDEX_NAME
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self._pid = 0
        self._known = 0
        """``seq`` the index was last seen to cover (spares :meth:`follow` a query)."""
        self.behind = BehindWriter()
        """The thread that indexes behind the writer (:mod:`.indexer`)."""
        self.statement: Callable[[], Statement | None] | None = None
        """Where readers get the latest signed statement of the unfinished sagas (set by the
        kit, which can check signatures; see :mod:`.indexsets`)."""
        _LIVE.add(self)

    # -- the connection -----------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        if self._db is not None and self._pid == os.getpid():
            return self._db
        unlink_planted_links(self.path)
        db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA wal_autocheckpoint=0")
            db.executescript(SCHEMA)
        except BaseException:
            db.close()
            raise
        self._db, self._pid = db, os.getpid()
        return db

    @property
    def indexed_seq(self) -> int:
        """The ``seq`` the index was last seen to cover."""
        return self._known

    def close(self) -> None:
        """Stop the indexer thread (after its current chunk), index what the writer left
        behind it (at most about :data:`~.indexer.BURST` records, never raising), and close
        the connection."""
        if self.behind.stop():
            self._index_behind(self.behind.seq)
        with self._lock:
            if self._db is not None and self._pid == os.getpid():
                self._db.close()
            self._db = None

    def _drop(self) -> None:
        """Forget a corrupt index file and its journal; the next use rebuilds it."""
        if self._db is not None and self._pid == os.getpid():
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
        self._db = None
        discard_index(self.home)

    # -- catching up --------------------------------------------------------------------------

    def refresh(self) -> None:
        """Bring the index up to the log's current end (rebuilding it if the log does not
        continue it, or if it is corrupt), then checkpoint its journal.

        Raises:
            CorruptLogError: the log itself is damaged where the index must read it.
            OSError: the index cannot be written (a read-only home).
        """
        with self._lock:
            try:
                self._catch_up(limit=None)
                self._connect().execute("PRAGMA wal_checkpoint(PASSIVE)")
            except sqlite3.DatabaseError:
                self._drop()
                self._catch_up(limit=None)

    def rebuild(self) -> None:
        """Throw the index away and build it again from the log."""
        with self._lock:
            self._drop()
            self._catch_up(limit=None)

    def follow(self, seq: int, *, every: int = 256) -> None:
        """The writer's hook after a batch that ended at ``seq``: when at least ``every``
        records are new, wake the indexer thread (:meth:`index_behind`) and return. O(1) on
        the caller's thread: it never reads the log, takes a lock or raises."""
        if seq - self._known < every:
            return
        self.behind.poke(self, seq)

    def index_behind(self) -> None:
        """What the indexer thread does when woken: index what the log gained (see
        :meth:`_index_behind`), unless the index is closing."""
        if not self.behind.stopping.is_set():
            self._index_behind(self.behind.seq)

    def _index_behind(self, seq: int, *, max_lag: int = 4 * BURST) -> None:
        """Index the log up to about ``seq``, but never wait (another thread or process
        indexing: skip) nor take on more than ``max_lag`` records (left to readers, who catch
        up whatever the lag). Never raises: a lagging index is caught up by its next reader."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            db = self._connect()
            indexed = self._known = read_point(db).seq
            if seq - indexed > max_lag:
                return
            db.execute("PRAGMA busy_timeout=0")
            try:
                self._catch_up(limit=max_lag)
            finally:
                db.execute("PRAGMA busy_timeout=30000")
        except Exception:  # never into the writer: the next reader catches up
            return
        finally:
            self._lock.release()

    def _catch_up(self, *, limit: int | None) -> None:
        db = self._connect()
        db.execute("BEGIN IMMEDIATE")
        try:
            point = read_point(db)
            if point == _START or not self.continues(point):
                point = self._wipe(db)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        done = 0
        while limit is None or done < limit:
            db.execute("BEGIN IMMEDIATE")
            try:
                moved = read_point(db)
                if moved != point:  # another indexer moved it meanwhile: go on from there
                    point = moved if self.continues(moved) else self._wipe(db)
                point, added = self._index_chunk(db, point)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            done += added
            self._known = point.seq
            if added < _CHUNK:
                return

    def _wipe(self, db: sqlite3.Connection) -> Point:
        db.execute("DELETE FROM records")
        db.execute("DELETE FROM sagas")
        db.execute("DELETE FROM meta")
        db.execute("INSERT INTO meta VALUES ('version', ?)", (VERSION,))
        save_point(db, _START)
        return _START

    def continues(self, point: Point) -> bool:
        """Whether the log holds the record ``point`` names, where it says, with its hash."""
        try:
            length = point.end - point.start
            record = read_at(
                self.home, self.chain, point.seg, point.start, length, point.seq, point.prev
            )
        except (IndexMismatch, OSError):
            return False
        return record.hash == point.hash

    def _index_chunk(self, db: sqlite3.Connection, point: Point) -> tuple[Point, int]:
        """Index up to :data:`_CHUNK` records after ``point``; returns the new point."""
        walker = walk_for_index(
            self.home / LOG_NAME, OS, first=point.seg, offset=point.end,
            seq=point.seq, prev=point.hash,
        )  # fmt: skip
        try:
            rows, sagas, last, added = chunk_rows(walker, _CHUNK)
        finally:
            walker.close()
        if last is not None:
            point = Point(
                last.seg, last.off, last.off + last.length, last.seq, last.prev, last.hash
            )
        db.executemany("INSERT OR REPLACE INTO records VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
        db.executemany(
            "INSERT INTO sagas VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
            "last_seq = excluded.last_seq, n = n + excluded.n, "
            "end_status = coalesce(excluded.end_status, end_status), "
            "began = coalesce(began, excluded.began), ended = coalesce(ended, excluded.ended)",
            [(sid, id_key(sid), *values) for sid, values in sagas.items()],
        )
        save_point(db, point)
        return point, added

    # -- reading ------------------------------------------------------------------------------

    def saga_records(self, saga_id: str) -> list[Record]:
        """The records of ``saga_id`` (its own and those that settle it), in log order, each
        verified against the log; empty for an unknown saga.

        Raises:
            IndexMismatch: a record does not verify, or the saga's records are not all there.
        """
        with self._lock:
            db = self._connect()
            rows = db.execute(
                "SELECT seq, own, seg, off, len, prev, hash FROM records WHERE saga = ? "
                "ORDER BY seq",
                (saga_id,),
            ).fetchall()
            stated = db.execute(SAGA_LINE, (saga_id,)).fetchone()
        own = [r[0] for r in rows if r[1]]
        if (stated is None and own) or (
            stated is not None and (len(own) != stated[4] or own[-1:] != [stated[2]])
        ):
            raise IndexMismatch(f"the index does not hold every record of saga {saga_id}")
        if not all(isinstance(r[5], bytes) and isinstance(r[6], bytes) for r in rows):
            raise IndexMismatch(f"the index's hashes of saga {saga_id} are not well formed")
        places = [Place(r[0], r[2], r[3], r[4], r[5].hex()) for r in rows]
        records = read_places(self.home, self.chain, places)
        for (seq, is_own, *_, digest), record in zip(rows, records, strict=True):
            if record.hash != bytes(digest).hex():
                raise IndexMismatch(f"record {seq} is not the one the index was built from")
            if (record.saga if is_own else settles(record)) != saga_id:
                raise IndexMismatch(f"record {seq} is not one of saga {saga_id}")
        problem = check_places(saga_id, [r for r in records if r.saga == saga_id])
        if problem is None and stated is not None:
            problem = check_line(saga_id, stated, records)
        if problem is not None:
            raise IndexMismatch(problem)
        return records

    def newest(
        self,
        *,
        limit: int,
        before: int | None = None,
        since: int | None = None,
        ended: bool | None = None,
        end_status: str | None = None,
    ) -> list[tuple[str, int]]:
        """``(saga id, first seq)`` of up to ``limit`` sagas, newest first: those that began
        before record ``before``, whose first record is at or after ``since`` (milliseconds),
        ended or not, and whose latest ``saga.end`` states ``end_status``."""
        sql, args = newest_query(before, since, ended, end_status)
        with self._lock:
            return [(r[0], r[1]) for r in self._connect().execute(sql, (*args, limit))]

    def unfinished(self) -> list[str]:
        """Ids of the sagas with no ``saga.end``, oldest first."""
        return self.unfinished_covered()[0]

    def unfinished_covered(self) -> tuple[list[str], int]:
        """:meth:`unfinished`, and the ``seq`` of the last record the index covered then."""
        with self._lock:
            db = self._connect()
            db.execute("BEGIN")  # one snapshot for both
            try:
                rows = db.execute(UNFINISHED_NOW)
                return [r[0] for r in rows], read_point(db).seq
            finally:
                db.execute("COMMIT")

    def select(self, sql: str, args: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        """The rows of one read-only query of the index."""
        with self._lock:
            return self._connect().execute(sql, args).fetchall()

    def holds_records_of(self, text: str, *, besides: str = "", typed_only: bool = False) -> bool:
        """Whether the ``records`` table has a row of a saga of its own, other than ``besides``,
        whose id starts with ``text`` as typed (an index probe) or, unless ``typed_only``, as
        :meth:`matching` matches it (a scan of the table's ids: dashes and ASCII case ignored)."""
        wanted = text.strip()
        key = id_key(wanted)
        with self._lock:
            db = self._connect()
            if db.execute(TYPED_ROWS, (wanted, wanted + PREFIX_END, besides)).fetchone():
                return True
            return (
                not typed_only
                and db.execute(KEYED_ROWS, (besides, key, key)).fetchone() is not None
            )

    def matching(self, text: str) -> tuple[list[str], int]:
        """The ids equal to ``text`` or whose :func:`id_key` starts with its key, oldest
        first, and how many sagas the index holds."""
        key = id_key(text.strip())
        if not key:
            return [], 0
        with self._lock:
            db = self._connect()
            rows = db.execute(
                "SELECT id FROM sagas WHERE id = ? OR (key >= ? AND key < ?) ORDER BY first_seq",
                (text.strip(), key, key + PREFIX_END),
            ).fetchall()
            total = db.execute("SELECT count(*) FROM sagas").fetchone()[0]
        return [r[0] for r in rows], int(total)
