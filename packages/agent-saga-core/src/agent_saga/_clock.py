"""Time and identity sources, injected so tests are deterministic."""

from __future__ import annotations

import itertools
import os
import threading
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


class _RandomFields:
    """80-bit random numbers drawn from a pool refilled in bulk (one ``getrandom`` per 64).

    ``list.pop`` is atomic, so no two ids, in any threads, get the same draw; a forked child
    starts with an empty pool, so parent and child never share one.
    """

    def __init__(self) -> None:
        self.pool: list[int] = []
        self._pop = self.pool.pop

    def reset(self) -> None:
        self.pool.clear()

    def take(self) -> int:
        try:
            return self._pop()
        except IndexError:
            raw = os.urandom(10 * 64)
            self.pool.extend(int.from_bytes(raw[i : i + 10]) for i in range(0, len(raw), 10))
            return self.take()


_FIELDS = _RandomFields()
os.register_at_fork(after_in_child=_FIELDS.reset)


class RandomIds:
    """Saga ids: RFC 9562 UUIDs, version 7 (``0193b5e2-7c1a-7d3e-9f2c-4b8a1e6d0c55``).

    The first 48 bits are the Unix time in milliseconds of the kit's clock, so ids sort by
    time as text; then the version (7) and variant (``10``) bits; the other 74 bits come from
    ``os.urandom``, drawn in bulk (:class:`_RandomFields`). Ids made by one source are strictly
    increasing, within a millisecond and when the clock steps back: such an id takes the last
    one's random field plus a random increment of up to 32 bits (RFC 9562 section 6.2, method
    2), moving on to the next millisecond if that field overflows. Thread-safe.
    """

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock = clock or SystemClock()
        self._lock = threading.Lock()
        self._last: tuple[int, int] = (-1, 0)
        """The millisecond and the 74-bit random field of the last id."""

    def new_id(self) -> str:
        now = int(self._clock.now() * 1000)
        fresh = _FIELDS.take()
        with self._lock:
            last_ms, last_field = self._last
            if now > last_ms:
                ms, field = now, fresh & _FIELD_MASK
            else:  # the same millisecond, or the clock went back: keep increasing
                ms, field = last_ms, last_field + 1 + (fresh & _INCREMENT_MASK)
                if field > _FIELD_MASK:
                    ms, field = last_ms + 1, fresh & _FIELD_MASK
            self._last = (ms, field)
        # unix_ts_ms (48 bits), version 7 and rand_a (12), variant 10 and rand_b (62).
        return "%08x-%04x-7%03x-%04x-%012x" % (  # noqa: UP031 - one format op is the fastest
            ms >> 16 & 0xFFFFFFFF,
            ms & 0xFFFF,
            field >> 62,
            0x8000 | field >> 48 & 0x3FFF,
            field & 0xFFFFFFFFFFFF,
        )


_FIELD_MASK = (1 << 74) - 1
"""rand_a (12 bits) and rand_b (62 bits) of a version 7 UUID, as one number."""
_INCREMENT_MASK = (1 << 32) - 1


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
