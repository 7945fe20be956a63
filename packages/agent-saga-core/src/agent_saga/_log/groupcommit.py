"""The ticket a caller holds in the file store's group-commit queue."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from .records import Entry, Record


class Ticket:
    """One caller's batch in the group-commit queue; its caller sleeps until woken once."""

    __slots__ = ("_gate", "done", "entries", "error", "records", "sync")

    def __init__(self, entries: Sequence[Entry], sync: bool) -> None:
        self.entries = entries
        self.sync = sync
        self.done = False
        self.error: Exception | None = None
        self.records: list[Record] = []
        self._gate = threading.Lock()
        self._gate.acquire()

    def wait(self) -> None:
        """Sleep until :meth:`finish` (batch written) or :meth:`wake` (lead the next batch)."""
        self._gate.acquire()

    def finish(self) -> None:
        self.done = True
        if self._gate.locked():
            self._gate.release()

    def wake(self) -> None:
        self._gate.release()
