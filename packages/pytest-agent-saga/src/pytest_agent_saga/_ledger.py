"""A witness of effects that outlives a killed process.

:class:`agent_saga.testing.Ledger` keeps its events in memory, so an effect made by a child
process that was killed is lost with it. :class:`JournalLedger` appends each event as one line
to a file (``O_APPEND``, one ``write`` per event, so concurrent processes never interleave
lines), and reads the file back on every query: the parent sees exactly what the killed child
did, which is what "charged once, refunded once" must be checked against.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import NamedTuple

MAX_FIELD = 512


class LedgerEvent(NamedTuple):
    action: str
    key: str


class JournalLedger:
    """Effects as ``(action, key)`` lines in a journal file; shared by every process.

    Tools and compensators call :meth:`record` with the idempotency key they received; tests
    read :meth:`count`, :meth:`events` and :meth:`duplicates`, or pass the ledger to
    :func:`pytest_agent_saga.assert_exactly_once`.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.touch(exist_ok=True)

    def record(self, action: str, key: str = "") -> None:
        """Record one effect. Fields may not contain tabs or newlines (they delimit events)."""
        for name, value in (("action", action), ("key", key)):
            if not isinstance(value, str) or len(value) > MAX_FIELD:
                raise ValueError(f"ledger {name} must be a string of at most {MAX_FIELD} chars")
            if "\t" in value or "\n" in value or "\r" in value:
                raise ValueError(f"ledger {name} may not contain tabs or newlines: {value!r}")
        if not action:
            raise ValueError("ledger action must not be empty")
        line = f"{action}\t{key}\n".encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    def events(self) -> list[LedgerEvent]:
        """Every effect, in the order it was recorded (by any process)."""
        lines = self.path.read_text(encoding="utf-8").splitlines()
        return [LedgerEvent(*line.split("\t", 1)) for line in lines if "\t" in line]

    def actions(self) -> list[str]:
        return [event.action for event in self.events()]

    def count(self, action: str, key: str | None = None) -> int:
        """How often ``action`` happened (for ``key`` only, when given)."""
        return sum(1 for e in self.events() if e.action == action and (key is None or e.key == key))

    def duplicates(self) -> list[tuple[str, str]]:
        """``(action, key)`` pairs recorded more than once (events without a key are ignored)."""
        counts = Counter(self.events())
        return sorted((e.action, e.key) for e, n in counts.items() if n > 1 and e.key)

    def __len__(self) -> int:
        return len(self.events())
