"""The Merkle tree over a log's records, kept up to date by reading only what was appended.

Leaf ``i`` of the tree is record ``seq = i + 1``; its leaf data is the record's 32-byte chain
hash, which commits to the record's content and to its predecessor. Checkpoints sign this tree's
root; inclusion proofs show that a disclosed record is leaf ``seq - 1``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from .._log.follow import LogFollower
from .._log.records import Record
from .._log.store import LogStore
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
    """A :class:`MerkleTree` that follows one store's log (see :class:`LogFollower`).

    Thread-safe.
    """

    def __init__(self, store: LogStore) -> None:
        self.store = store
        self.tree = MerkleTree()
        self._follower = LogFollower(store)
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        return self.tree.size

    def update(self) -> int:
        """Take in every record appended so far; returns the tree size.

        Raises:
            CorruptLogError: the log no longer continues the records already taken in.
        """
        with self._lock:
            for record in self._follower.new_records():
                self.tree.append(record_leaf(record))
            return self.tree.size
