"""Reading only what was appended to a log since the last look."""

from __future__ import annotations

from collections.abc import Iterator

from .._errors import CorruptLogError
from .filestore import FileLogStore
from .records import GENESIS, Record
from .store import LogStore


class LogFollower:
    """Yields the records appended to ``store`` since the previous call.

    On the file store it resumes at the last byte offset; on other stores it re-reads the log
    and skips what it has seen (checking that the last record seen is still there). Not
    thread-safe: each user keeps its own follower.
    """

    def __init__(self, store: LogStore) -> None:
        self.store = store
        self.seen = 0
        self._offset = 0
        self._last = GENESIS

    def new_records(self) -> Iterator[Record]:
        """The records after the last one returned so far, in order.

        Raises:
            CorruptLogError: the log no longer continues the records already returned.
        """
        if isinstance(self.store, FileLogStore):
            for offset, record in self.store.follow(self._offset, self.seen, self._last):
                self._offset = offset
                self._take(record)
                yield record
            return
        for record in self.store.records():
            if record.seq <= self.seen:
                if record.seq == self.seen and record.hash != self._last:
                    raise CorruptLogError(
                        str(self.store.describe().get("where", self.store.kind)),
                        record.seq,
                        "the log no longer holds the records already read",
                        record.seq,
                    )
                continue
            self._take(record)
            yield record

    @property
    def last(self) -> str:
        """Hash of the last record returned (:data:`GENESIS` before any)."""
        return self._last

    @property
    def offset(self) -> int:
        """Where the last record returned ends in a file store (-1 for another store)."""
        return self._offset if isinstance(self.store, FileLogStore) else -1

    def start_at(self, seq: int, last: str, offset: int) -> bool:
        """Follow a file store from after record ``seq`` (hash ``last``, ending at ``offset``)
        instead of from its start; only before anything was read. The next call of
        :meth:`new_records` fails if the log does not continue there. Returns whether it did
        (not on another store)."""
        if self.seen or not isinstance(self.store, FileLogStore):
            return False
        self.seen, self._last, self._offset = seq, last, offset
        return True

    def _take(self, record: Record) -> None:
        self.seen, self._last = record.seq, record.hash
