"""The ticket a caller holds in the file store's group-commit queue."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from .records import Entry, Record


class Ticket:
    """One caller's batch in the group-commit queue; its caller sleeps until woken once.

    A caller that will wait calls :meth:`hold` while holding the queue's mutex, before any
    leader can take its ticket; a caller that leads never needs the gate, and has none.
    """

    __slots__ = ("_gate", "done", "entries", "error", "records", "sync")

    def __init__(self, entries: Sequence[Entry], sync: bool) -> None:
        self.entries = entries
        self.sync = sync
        self.done = False
        self.error: Exception | None = None
        self.records: list[Record] = []
        self._gate: threading.Lock | None = None

    def hold(self) -> None:
        """Close the gate that :meth:`wait` sleeps on (before the ticket can be finished)."""
        gate = self._gate = threading.Lock()
        gate.acquire()

    def wait(self) -> None:
        """Sleep until :meth:`finish` (batch written) or :meth:`wake` (lead the next batch)."""
        assert self._gate is not None  # hold() came first
        self._gate.acquire()

    def finish(self) -> None:
        self.done = True
        gate = self._gate
        if gate is not None and gate.locked():
            gate.release()

    def wake(self) -> None:
        assert self._gate is not None  # a ticket queued behind a leader
        self._gate.release()
