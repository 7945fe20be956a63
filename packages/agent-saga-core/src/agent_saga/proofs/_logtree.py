"""The Merkle tree over a log's records, kept up to date by reading only what was appended.

Leaf ``i`` of the tree is record ``seq = i + 1``; its leaf data is the record's 32-byte chain
hash, which commits to the record's content and to its predecessor. Checkpoints sign this tree's
root; inclusion proofs show that a disclosed record is leaf ``seq - 1``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from .._log.follow import LogFollower
from .._log.records import Record
from .._log.store import LogStore
from .._log.unfinishedset import fold
from ._frontier import MerkleFrontier
from ._merkle import leaf_hash
from ._tree import MerkleTree

__all__ = ["LogTree", "record_leaf", "tree_of"]


def record_leaf(record: Record) -> bytes:
    """The leaf hash of a record: ``SHA-256(0x00 || chain hash)``."""
    return leaf_hash(bytes.fromhex(record.hash))


def tree_of(records: Iterable[Record]) -> MerkleTree:
    """The tree over ``records`` (which must start at ``seq`` 1 and be in order)."""
    return MerkleTree.from_leaf_hashes(record_leaf(r) for r in records)


class LogTree:
    """The Merkle frontier of one store's log, kept up to date by :class:`LogFollower`.

    Memory is O(log n) hashes whatever the log's size: no leaf is kept. The roots at the sizes
    passed to :meth:`capture` are remembered when the tree passes them (the sizes of
    checkpoints to extend). :meth:`start_at` starts it after a verified prefix of a file log
    instead of from record 1. Thread-safe.
    """

    def __init__(self, store: LogStore) -> None:
        self.store = store
        self.frontier = MerkleFrontier()
        self.roots: dict[int, bytes] = {}
        self.edge: list[bytes] = []
        self._capture: set[int] = set()
        self._follower = LogFollower(store)
        self._lock = threading.Lock()
        self.unfinished: dict[str, None] | None = {}
        """The sagas begun and not ended in the records taken in (:mod:`.unfinishedset`);
        ``None`` while unknown (started after a prefix: see :meth:`head`)."""

    @property
    def size(self) -> int:
        return self.frontier.size

    def root(self) -> bytes:
        return self.frontier.root()

    def capture(self, size: int) -> None:
        """Remember the root at ``size`` when the tree reaches it (now, if it is there)."""
        with self._lock:
            if size == self.frontier.size:
                self.roots[size] = self.frontier.root()
            elif size > self.frontier.size:
                self._capture.add(size)

    def start_at(
        self,
        size: int,
        frontier: list[bytes],
        edge: list[bytes],
        last: str,
        offset: int,
        root: bytes,
    ) -> bool:
        """Start after record ``size`` (hash ``last``, ending at ``offset``) of a file log,
        whose frontier was confirmed by a signed root; only before anything was read.

        Returns whether it did. The next :meth:`update` checks that the log continues it.
        """
        with self._lock:
            if self.frontier.size or not self._follower.start_at(size, last, offset):
                return False
            self.frontier = MerkleFrontier(size, frontier)
            self.edge = list(edge)
            self.roots[size] = root
            self.unfinished = None
            return True

    def restart(self) -> None:
        """Forget everything and read again from record 1 (a start point that did not hold)."""
        with self._lock:
            self.frontier = MerkleFrontier()
            self.roots.clear()
            self.edge = []
            self.unfinished = {}
            self._follower = LogFollower(self.store)

    @property
    def last_hash(self) -> str:
        return self._follower.last

    @property
    def offset(self) -> int:
        """Where the last record taken in ends in a file log (-1 for another store)."""
        return self._follower.offset

    def snapshot(self) -> tuple[int, list[bytes], list[bytes], str, int]:
        """``(size, frontier, edge, last hash, offset)``, taken together."""
        with self._lock:
            return (
                self.frontier.size, self.frontier.hashes, list(self.edge),
                self._follower.last, self._follower.offset,
            )  # fmt: skip

    def update(self) -> int:
        """Take in every record appended so far; returns the tree size.

        Raises:
            CorruptLogError: the log no longer continues the records already taken in.
        """
        with self._lock:
            frontier, capture, unfinished = self.frontier, self._capture, self.unfinished
            for record in self._follower.new_records():
                self.edge = frontier.append_with_edge(record_leaf(record))
                if unfinished is not None:
                    fold(unfinished, record)
                if frontier.size in capture:
                    capture.discard(frontier.size)
                    self.roots[frontier.size] = frontier.root()
            return frontier.size

    def head(
        self, recount: Callable[[int], list[str] | None]
    ) -> tuple[int, bytes, list[str] | None]:
        """``(size, root, unfinished sagas)`` taken together; when the unfinished sagas are
        not known, ``recount(size)`` finds them (``None``: it cannot), holding the tree still
        meanwhile, and they are kept and followed from then on."""
        with self._lock:
            size, root = self.frontier.size, self.frontier.root()
            if self.unfinished is None:
                found = recount(size)
                self.unfinished = None if found is None else dict.fromkeys(found)
            return size, root, None if self.unfinished is None else list(self.unfinished)
