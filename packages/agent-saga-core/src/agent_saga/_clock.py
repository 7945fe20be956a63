"""Time and identity sources, injected so tests are deterministic."""

from __future__ import annotations

import itertools
import os
import time
from typing import Protocol


class Clock(Protocol):
    """Wall-clock and monotonic time as the engine sees them."""

    def now(self) -> float:
        """Seconds since the epoch (wall clock), used for record timestamps and expiry."""
        ...

    def monotonic(self) -> float:
        """Monotonic seconds, used for durations and timeouts."""
        ...

    def sleep(self, seconds: float) -> None:
        """Block for ``seconds`` (a fake clock advances instead)."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class FakeClock:
    """A clock that only moves when told to; ``sleep`` advances it instantly."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._mono = 0.0
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        self._now += seconds
        self._mono += seconds


class IdSource(Protocol):
    """Produces saga ids."""

    def new_id(self) -> str: ...


class RandomIds:
    """Saga ids: a sortable UTC timestamp, then 64 random bits (``20261130T034501-9f2c...``)."""

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock = clock or SystemClock()
        self._second: tuple[int, str] = (-1, "")
        """The last second formatted, and its text (formatting is most of an id's cost)."""

    def new_id(self) -> str:
        second = int(self._clock.now())
        last, stamp = self._second
        if second != last:
            stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(second))
            self._second = (second, stamp)
        return f"{stamp}-{os.urandom(8).hex()}"


class SequentialIds:
    """Deterministic ids for tests: ``saga-0001``, ``saga-0002``, ..."""

    def __init__(self, prefix: str = "saga") -> None:
        self._prefix = prefix
        self._counter = itertools.count(1)

    def new_id(self) -> str:
        return f"{self._prefix}-{next(self._counter):04d}"


def format_ts(ts: float) -> str:
    """Render a record timestamp for people (UTC, millisecond precision)."""
    from datetime import UTC, datetime  # only people need this, not the engine

    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"
