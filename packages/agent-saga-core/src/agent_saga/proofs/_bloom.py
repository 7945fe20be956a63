"""A filter of the ended sagas' ids that grows with them: a series of Bloom filters.

:class:`Ended` answers "was this id added?" with no false negatives and rare false positives,
in memory that grows about linearly with the ids added (a scalable Bloom filter: Almeida,
Baquero, Preguica and Hutchison, 2007). Filter ``i`` (from 0) holds ``c_i = capacity * 2**i``
ids in ``k = probes`` slices of ``m_i`` bits, one bit set in each slice per id; an id is added
to the newest filter, and when that one holds its ``c_i`` ids a new one for twice as many is
started, with a lower fill: ``m_i = ceil(c_i / -ln(1 - f_i)) + 1`` for ``f_i = 2**(-1 - i/k)``.
An id is held when any filter holds it. Eight slices share the bytes of one array (slice ``j``
is bit ``j % 8`` of the bytes of array ``j // 8``), so a probe is one byte and a fixed mask.

**False positives.** A slice of filter ``i`` holding ``j <= c_i`` ids has an expected fraction
of its bits set of ``1 - (1 - 1/m_i)**j <= 1 - e**(-c_i / (m_i - 1)) <= f_i``. Each probe takes
its own 64 bits of the id's hash, so the slices are independent and an id not added is taken
for one by filter ``i`` with probability at most ``f_i**k = 2**(-k - i)``, by the series with
probability under ``sum_i 2**(-k - i) < 2**(1 - k)``, however many filters there are. A certify
pass asks once for each saga it has not seen (before the saga is added), so over a pass of
``N`` sagas the expected number of false positives is under ``N * 2**(1 - k)``. With
:data:`PROBES` = 40: ``N * 1.82e-12``, under 0.01 for any log of fewer than 5.5 billion sagas
(summing each query's expected rate over the filters' actual sizes gives 1.8e-6 at a million
sagas, 1.8e-3 at a billion). No memory of a few bytes an id keeps the expected count bounded
for every ``N``: the first filter's rate stays fixed while every later saga is checked against
it, so past that the count grows linearly, by 0.0018 a billion sagas.

**Memory.** Filter ``i`` spends ``ceil(k/8) * m_i`` bytes, ``ceil(k/8) / -ln(1 - f_i)`` an id
it holds: 7.2 in the first (1,024 ids, 7,395 bytes), 9.0 in the tenth (where the millionth id
goes), 11.2 in the twentieth (the billionth). The newest filter is allocated whole, so the
tables hold up to twice the newest filter's bytes an id just after a growth; computed from the
sizes: 7.4 bytes an id at 1,000 ids, 7.8 at 31,744 (five filters full), 10.6 at 100,000, 16.5
at 555,556 (just after a growth), 9.2 at a million, 11.8 at a billion. Hashing is one
``shake_128`` per id (8 bytes a probe): double hashing from two 64-bit values would make an id
not added collide with an added one in every slice with probability about ``c_i / m_i**2``
(5e-4 in a full first filter), far above these rates.
"""

from __future__ import annotations

import hashlib
import math

__all__ = ["FIRST_CAPACITY", "PROBES", "Ended"]

FIRST_CAPACITY = 1024
"""Ids the first filter holds (7,395 bytes with :data:`PROBES`)."""
PROBES = 40
"""Probes (slices) of every filter: a false-positive rate under ``2**-39`` for the series."""


class _Filter:
    """One partitioned Bloom filter holding ``capacity`` ids at fill ``2**(-1 - index/probes)``."""

    __slots__ = ("bases", "capacity", "count", "index", "length", "table")

    def __init__(self, capacity: int, probes: int, index: int) -> None:
        self.capacity = capacity
        self.index = index
        self.count = 0
        fill = 2.0 ** (-1 - index / probes)
        self.length = math.ceil(capacity / -math.log1p(-fill)) + 1
        arrays = [array * self.length for array in range((probes + 7) >> 3)]
        self.bases = [arrays[probe >> 3] for probe in range(probes)]  # one int per array
        self.table = bytearray(len(arrays) * self.length)


_MASKS = [1 << (probe & 7) for probe in range(256)]


class Ended:
    """The ids added so far (see the module docstring): no false negatives."""

    def __init__(self, capacity: int = FIRST_CAPACITY, probes: int = PROBES) -> None:
        if not (capacity >= 1 and 1 <= probes <= len(_MASKS)):
            raise ValueError(
                f"a filter takes a capacity of 1 or more and 1-256 probes: {capacity}, {probes}"
            )
        self.probes = probes
        self.filters = [_Filter(capacity, probes, 0)]

    def _words(self, saga_id: str) -> memoryview:
        """64 bits of the id's hash for each probe."""
        digest = hashlib.shake_128(saga_id.encode()).digest(8 * self.probes)
        return memoryview(digest).cast("Q")

    def add(self, saga_id: str) -> None:
        newest = self.filters[-1]
        if newest.count >= newest.capacity:
            newest = _Filter(newest.capacity * 2, self.probes, newest.index + 1)
            self.filters.append(newest)
        table, length = newest.table, newest.length
        for base, word, mask in zip(newest.bases, self._words(saga_id), _MASKS, strict=False):
            table[base + word % length] |= mask
        newest.count += 1

    def __contains__(self, saga_id: str) -> bool:
        words = self._words(saga_id)
        for held in self.filters:
            table, length = held.table, held.length
            for base, word, mask in zip(held.bases, words, _MASKS, strict=False):
                if not table[base + word % length] & mask:
                    break  # half the time or more at each probe
            else:
                return True
        return False

    @property
    def size(self) -> int:
        """Bytes of the tables."""
        return sum(len(held.table) for held in self.filters)
