"""The Merkle frontier: an RFC 9162 tree's root kept in O(log n) hashes while leaves stream by.

:class:`MerkleFrontier` holds the roots of the complete subtrees that tile ``[0, size)``
(one per set bit of ``size``, largest first: the tree's *compact range*). Appending a leaf
merges it with the trailing subtrees of equal size; the root is their right fold. That is all a
streaming pass needs to sign a checkpoint or compare the log with one, with no leaf kept.

The subtrees merged into a leaf as it is appended are its inclusion path inside the smallest
subtree of the frontier (its *edge*): together with the frontier they bind the last record's
hash to the root, which is what lets a later pass resume after that record (see
:mod:`._resume`).

Same tree and same hashing as :mod:`._merkle` and :class:`~._tree.MerkleTree` (the tests
compare them on every size up to a few hundred).
"""

from __future__ import annotations

import hashlib
from binascii import unhexlify

from ._merkle import EMPTY_ROOT, HASH_SIZE, InvalidProofError

__all__ = ["MerkleFrontier", "fold_edge", "fold_frontier"]

_NODE_PREFIX = b"\x01"
_LEAF_PREFIX = b"\x00"
_sha256 = hashlib.sha256


class MerkleFrontier:
    """The compact range of an append-only RFC 9162 tree (see the module docstring).

    Invariant: ``len(hashes) == popcount(size)`` and ``hashes[i]`` is the root of the ``i``-th
    complete subtree of the tiling of ``[0, size)``, largest first. Not thread-safe.
    """

    __slots__ = ("_stack", "size")

    def __init__(self, size: int = 0, hashes: list[bytes] | None = None) -> None:
        stack = list(hashes or [])
        if size < 0 or len(stack) != size.bit_count():
            raise InvalidProofError(f"a frontier of size {size} holds {size.bit_count()} hashes")
        if any(len(h) != HASH_SIZE for h in stack):
            raise InvalidProofError(f"frontier hashes must be {HASH_SIZE} bytes")
        self._stack = stack
        self.size = size

    @property
    def hashes(self) -> list[bytes]:
        """The subtree roots, largest subtree first (a copy)."""
        return list(self._stack)

    def append_chain_hash(self, digest_hex: bytes) -> None:
        """Append the leaf of a record whose chain hash is ``digest_hex`` (ASCII hex)."""
        node = _sha256(_LEAF_PREFIX + unhexlify(digest_hex)).digest()
        size, stack = self.size, self._stack
        while size & 1:
            node = _sha256(_NODE_PREFIX + stack.pop() + node).digest()
            size >>= 1
        stack.append(node)
        self.size += 1

    def append_chain_hashes(self, digests_hex: list[bytes]) -> None:
        """:meth:`append_chain_hash` for each of ``digests_hex``, in order (one call a batch)."""
        size, stack, sha, unhex = self.size, self._stack, _sha256, unhexlify
        for digest_hex in digests_hex:
            node = sha(_LEAF_PREFIX + unhex(digest_hex)).digest()
            bits = size
            while bits & 1:
                node = sha(_NODE_PREFIX + stack.pop() + node).digest()
                bits >>= 1
            stack.append(node)
            size += 1
        self.size = size

    def append_subtree(self, node: bytes, height: int) -> None:
        """Append the root of a complete subtree of ``2**height`` leaves built elsewhere.

        Raises:
            InvalidProofError: the subtree is not aligned (``size`` is not a multiple of its
                width), so it is not a node of the tree.
        """
        if height < 0 or self.size % (1 << height) or len(node) != HASH_SIZE:
            raise InvalidProofError(f"no subtree of height {height} starts at {self.size}")
        size, stack = self.size >> height, self._stack
        while size & 1:
            node = _sha256(_NODE_PREFIX + stack.pop() + node).digest()
            size >>= 1
        stack.append(node)
        self.size += 1 << height

    def append_with_edge(self, leaf: bytes) -> list[bytes]:
        """Append ``leaf`` (a leaf hash) and return its edge: the subtrees it was merged with,
        smallest first, i.e. its inclusion path inside the frontier's last subtree."""
        node, size, stack, edge = leaf, self.size, self._stack, []
        while size & 1:
            left = stack.pop()
            edge.append(left)
            node = _sha256(_NODE_PREFIX + left + node).digest()
            size >>= 1
        stack.append(node)
        self.size += 1
        return edge

    def root(self) -> bytes:
        """``MTH`` of the leaves appended so far."""
        return fold_frontier(self._stack)


def fold_frontier(hashes: list[bytes]) -> bytes:
    """The root of a tree from its compact range (largest subtree first)."""
    if not hashes:
        return EMPTY_ROOT
    result = hashes[-1]
    for left in reversed(hashes[:-1]):
        result = _sha256(_NODE_PREFIX + left + result).digest()
    return result


def fold_edge(leaf: bytes, edge: list[bytes]) -> bytes:
    """The root of the subtree that ``edge`` (smallest first) builds over ``leaf`` as its last
    leaf: equal to the frontier's last hash when ``leaf`` is the tree's last leaf."""
    node = leaf
    for left in edge:
        node = _sha256(_NODE_PREFIX + left + node).digest()
    return node
