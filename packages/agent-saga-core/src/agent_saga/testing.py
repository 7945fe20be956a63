"""Test doubles for code that uses agent-saga: a ledger witness, a fake clock, deterministic ids.

Import from here in tests; nothing in this module is used by the engine itself.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass

from ._clock import FakeClock, SequentialIds
from ._killswitch import MemoryKillSwitch
from ._store import MemoryLogStore


@dataclass(frozen=True, slots=True)
class LedgerEvent:
    action: str
    key: str


class Ledger:
    """A fake external system that records every effect with its idempotency key.

    It is the witness of "charged once, refunded once": tools and compensators call
    :meth:`record`; tests read :meth:`count` and :meth:`actions`. Thread-safe.
    """

    def __init__(self) -> None:
        self._events: list[LedgerEvent] = []
        self._counts: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def record(self, action: str, key: str = "") -> None:
        with self._lock:
            self._events.append(LedgerEvent(action, key))
            self._counts[(action, key)] += 1

    def count(self, action: str, key: str | None = None) -> int:
        """How often ``action`` happened (for ``key`` only, when given)."""
        with self._lock:
            if key is not None:
                return self._counts[(action, key)]
            return sum(n for (name, _), n in self._counts.items() if name == action)

    def actions(self) -> list[str]:
        """Actions in the order they happened."""
        with self._lock:
            return [event.action for event in self._events]

    def events(self) -> list[LedgerEvent]:
        with self._lock:
            return list(self._events)

    def duplicates(self) -> list[tuple[str, str]]:
        """``(action, key)`` pairs that happened more than once."""
        with self._lock:
            return sorted(pair for pair, n in self._counts.items() if n > 1 and pair[1])


__all__ = [
    "FakeClock",
    "Ledger",
    "LedgerEvent",
    "MemoryKillSwitch",
    "MemoryLogStore",
    "SequentialIds",
]
