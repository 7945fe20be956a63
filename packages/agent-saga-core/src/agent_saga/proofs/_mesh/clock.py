"""The merged view's order: hybrid logical clocks, computed from the records themselves.

The ordering rule. Every record gets a clock ``(l, c)``:

* the records it *follows* are the one before it in its origin's chain and, for a ``mesh.seen``
  record, the last record of each other origin its device had seen when it synced (named by
  ``seq`` and hash; a reference to a record the set does not hold, or whose hash differs, is
  ignored);
* ``l`` is the largest of the record's own ``ts`` (its device's wall clock, in milliseconds) and
  the ``l`` of every record it follows;
* ``c`` is 0 when ``l`` is the record's own ``ts`` and no record it follows has that ``l``, else
  one more than the largest ``c`` among the records it follows with that ``l``.

Records are ordered by ``(l, c, origin id, seq)``. A record therefore comes after everything it
follows (causality is kept even when a device's clock is behind), concurrent records are ordered
by time, and the order is a function of the set of records alone: every sync order converges to
the same view. (This is the hybrid logical clock of Kulkarni et al., evaluated after the fact:
the clock is carried implicitly by each record's timestamp and its causal references, so the
record format does not change.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..._log.records import Kind, Record

SEEN_KIND = Kind.MESH_SEEN.value
"""A device's record of what it had seen of the other origins when it synced."""

__all__ = ["SEEN_KIND", "MeshRecord", "hlc_order", "seen_frontier"]


@dataclass(frozen=True)
class MeshRecord:
    """A record in the merged view: its origin, the record as its device wrote it, its clock."""

    origin: str
    """The origin's name (its key's name)."""
    origin_id: str
    record: Record
    clock: tuple[int, int]


def seen_frontier(record: Record) -> dict[str, tuple[int, str]]:
    """The ``origin id -> (seq, hash)`` a ``mesh.seen`` record names (malformed parts skipped)."""
    if record.kind != SEEN_KIND:
        return {}
    frontier = record.data.get("frontier")
    found: dict[str, tuple[int, str]] = {}
    for origin_id, tip in (frontier if isinstance(frontier, dict) else {}).items():
        if not isinstance(tip, dict):
            continue
        seq, digest = tip.get("seq"), tip.get("hash")
        if type(seq) is int and seq > 0 and isinstance(digest, str):
            found[origin_id] = (seq, digest)
    return found


def hlc_order(chains: Mapping[str, tuple[str, Sequence[Record]]]) -> list[MeshRecord]:
    """Every record of ``chains`` (origin id -> (origin name, records from seq 1)) in the
    merged order stated in the module docstring."""
    clocks: dict[str, list[tuple[int, int]]] = {origin: [] for origin in chains}
    done = dict.fromkeys(chains, 0)

    def follows(origin: str, index: int) -> list[tuple[str, int]] | None:
        """The records (origin, index) ``origin``'s record ``index`` follows; ``None`` while
        one of them has no clock yet."""
        record = chains[origin][1][index]
        deps = [(origin, index - 1)] if index else []
        for other, (seq, digest) in seen_frontier(record).items():
            theirs = chains.get(other)
            if other == origin or theirs is None or seq > len(theirs[1]):
                continue
            if theirs[1][seq - 1].hash != digest:
                continue
            if seq > done[other]:
                return None
            deps.append((other, seq - 1))
        return deps

    def stamp(origin: str, index: int, deps: list[tuple[str, int]]) -> None:
        own = chains[origin][1][index].ts
        before = [clocks[o][i] for o, i in deps]
        top = max([own, *(lc[0] for lc in before)])
        same = [lc[1] for lc in before if lc[0] == top]
        clocks[origin].append((top, max(same) + 1 if same else 0))
        done[origin] += 1

    progress = True
    while progress:
        progress = False
        for origin in sorted(chains):
            records = chains[origin][1]
            while done[origin] < len(records):
                deps = follows(origin, done[origin])
                if deps is None:
                    break
                stamp(origin, done[origin], deps)
                progress = True
    for origin in sorted(chains):  # only a reference circle (forged hashes) can leave any
        records = chains[origin][1]
        while done[origin] < len(records):
            index = done[origin]
            stamp(origin, index, [(origin, index - 1)] if index else [])
    merged = [
        MeshRecord(name, origin, record, clocks[origin][index])
        for origin, (name, records) in chains.items()
        for index, record in enumerate(records)
    ]
    merged.sort(key=lambda m: (m.clock, m.origin_id, m.record.seq))
    return merged
