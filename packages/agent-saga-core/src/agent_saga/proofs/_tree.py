"""An append-only RFC 9162 Merkle tree that produces roots and proofs for any past size.

:class:`MerkleTree` stores the hash of every *complete* subtree: level ``k`` holds, in one
contiguous ``bytearray``, the roots of the aligned subtrees of ``2**k`` leaves
``[i * 2**k, (i + 1) * 2**k)`` that fit in the tree. Appending a leaf adds its hash to level 0
and one hash to each level where it completes a pair, so appends cost one node hash on average
and never rehash the log. A subtree that is complete in the current tree is complete, with the
same hash, in every later tree, so the stored levels also serve every past size: the root of a
size-``m`` tree is the right fold of the ``popcount(m)`` stored subtrees that tile ``[0, m)``
(its compact range), and every hash of a proof is either one stored node or such a fold. Roots
and proofs for any size therefore cost ``O(log n)`` reads and hashes.

Memory is about ``64 * n`` bytes for ``n`` leaves (two contiguous hash arrays' worth), with no
Python object per node.

The module-level :func:`root`, :func:`inclusion_proof` and :func:`consistency_proof` are the
same operations as pure functions of a list of leaf hashes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from itertools import islice

from ._merkle import EMPTY_ROOT, HASH_SIZE, InvalidProofError, check_count, check_hash

__all__ = ["MerkleTree", "consistency_proof", "inclusion_proof", "root"]

_NODE_PREFIX = b"\x01"
_sha256 = hashlib.sha256


class MerkleTree:
    """An append-only RFC 9162 Merkle tree over 32-byte leaf hashes.

    Invariants: for every level ``k``, ``len(levels[k]) == HASH_SIZE * (size >> k)``, and the
    ``i``-th hash of level ``k`` is ``MTH`` of leaves ``[i << k, (i + 1) << k)``. Stored hashes
    are never modified, only appended.

    Not thread-safe: the owner serializes appends and reads (the log appends under its own
    lock). An append or extend refused with :class:`~agent_saga.proofs._merkle.InvalidProofError`
    leaves the tree unchanged.
    """

    __slots__ = ("_levels", "_size")

    def __init__(self) -> None:
        """Create an empty tree (size 0, root :data:`~agent_saga.proofs._merkle.EMPTY_ROOT`)."""
        self._levels: list[bytearray] = [bytearray()]
        self._size = 0

    @classmethod
    def from_leaf_hashes(cls, leaf_hashes: Iterable[bytes]) -> MerkleTree:
        """Return a tree holding ``leaf_hashes`` in order (see :meth:`extend`)."""
        tree = cls()
        tree.extend(leaf_hashes)
        return tree

    @property
    def size(self) -> int:
        """The number of leaves appended so far."""
        return self._size

    def __len__(self) -> int:
        return self._size

    def __repr__(self) -> str:
        return f"MerkleTree(size={self._size})"

    def append(self, leaf_hash: bytes) -> int:
        """Append one leaf hash and return its index.

        Costs one leaf copy plus, on average, one node hash (at most ``log2(size)``).

        Raises:
            InvalidProofError: ``leaf_hash`` is not a 32-byte ``bytes``; the tree is unchanged.
        """
        levels = self._levels
        levels[0] += check_hash(leaf_hash, "leaf hash")
        index = self._size
        self._size = count = index + 1
        level = 0
        while not count & 1:  # this level now ends in a complete pair: hash it one level up
            if level + 1 == len(levels):
                levels.append(bytearray())
            levels[level + 1] += _sha256(_NODE_PREFIX + levels[level][-2 * HASH_SIZE :]).digest()
            level += 1
            count >>= 1
        return index

    def extend(self, leaf_hashes: Iterable[bytes]) -> None:
        """Append many leaf hashes, hashing each new node exactly once, level by level.

        All hashes are checked before any is appended, so a refused batch changes nothing.
        The iterable is consumed once, before anything is hashed.

        Raises:
            InvalidProofError: some element is not a 32-byte ``bytes``.
        """
        hashes = list(leaf_hashes)
        for position, value in enumerate(hashes):
            check_hash(value, f"leaf hash {position}")
        if not hashes:
            return
        levels = self._levels
        levels[0] += b"".join(hashes)
        self._size += len(hashes)
        level = 0
        while self._size >> (level + 1):
            if level + 1 == len(levels):
                levels.append(bytearray())
            parent = levels[level + 1]
            start = len(parent) * 2
            end = (self._size >> (level + 1)) * 2 * HASH_SIZE
            if start == end:  # no new pair here, so none above either
                break
            children = bytes(levels[level][start:end])
            step = 2 * HASH_SIZE
            parent += b"".join(
                [
                    _sha256(_NODE_PREFIX + children[i : i + step]).digest()
                    for i in range(0, len(children), step)
                ]
            )
            level += 1

    def leaf_hash(self, index: int) -> bytes:
        """Return the hash stored for leaf ``index``.

        Raises:
            InvalidProofError: ``index`` is not an integer in ``[0, size)``.
        """
        check_count(index, "index")
        if index >= self._size:
            raise InvalidProofError(f"index {index} is not below size {self._size}")
        return self._node(0, index)

    def root(self, size: int | None = None) -> bytes:
        """Return ``MTH`` of the first ``size`` leaves (default: all of them).

        Any past size is allowed, which is what checkpoints need. ``root(0)`` is
        :data:`~agent_saga.proofs._merkle.EMPTY_ROOT`.

        Raises:
            InvalidProofError: ``size`` is negative, not an integer, or above :attr:`size`.
        """
        size = self._check_size(size, "size")
        if size == 0:
            return EMPTY_ROOT
        return self._range_root(0, size)

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """Return RFC 9162 ``PATH(index, D[0:size])``, leaf level first.

        The proof verifies with :func:`~agent_saga.proofs._merkle.verify_inclusion` against
        ``root(size)``. Costs ``O(log size)`` reads and hashes.

        Raises:
            InvalidProofError: ``size`` is out of range (see :meth:`root`) or ``index >= size``.
        """
        size = self._check_size(size, "size")
        check_count(index, "index")
        if index >= size:
            raise InvalidProofError(f"index {index} is not below size {size}")
        path: list[bytes] = []
        lo, hi = 0, size
        while hi - lo > 1:  # descend from the root; [lo, hi) is the subtree holding index
            split = lo + _split(hi - lo)
            if index < split:
                path.append(self._range_root(split, hi))
                hi = split
            else:
                path.append(self._range_root(lo, split))
                lo = split
        path.reverse()
        return path

    def consistency_proof(self, size1: int, size2: int | None = None) -> list[bytes]:
        """Return RFC 9162 ``PROOF(size1, D[0:size2])`` (default ``size2``: the current size).

        The proof verifies with :func:`~agent_saga.proofs._merkle.verify_consistency` against
        ``root(size1)`` and ``root(size2)``. It is empty when ``size1 == size2``. Costs
        ``O(log size2)`` reads and hashes.

        Raises:
            InvalidProofError: ``size2`` is out of range, ``size1 == 0`` (a proof from the empty
                tree is meaningless) or ``size1 > size2``.
        """
        size2 = self._check_size(size2, "size2")
        check_count(size1, "size1")
        if size1 == 0:
            raise InvalidProofError("a consistency proof from the empty tree is meaningless")
        if size1 > size2:
            raise InvalidProofError(f"size1 {size1} is larger than size2 {size2}")
        proof: list[bytes] = []
        lo, hi = 0, size2
        whole_old_tree = True  # SUBPROOF's flag b: the old tree is still the leftmost subtree
        while hi != size1:  # descend until [lo, hi) ends exactly where the old tree ends
            split = lo + _split(hi - lo)
            if size1 <= split:
                proof.append(self._range_root(split, hi))
                hi = split
            else:
                proof.append(self._range_root(lo, split))
                lo = split
                whole_old_tree = False
        if not whole_old_tree:
            proof.append(self._range_root(lo, hi))
        proof.reverse()
        return proof

    def _check_size(self, size: int | None, what: str) -> int:
        if size is None:
            return self._size
        check_count(size, what)
        if size > self._size:
            raise InvalidProofError(f"{what} {size} is above the tree size {self._size}")
        return size

    def _node(self, level: int, index: int) -> bytes:
        start = index * HASH_SIZE
        return bytes(self._levels[level][start : start + HASH_SIZE])

    def _range_root(self, lo: int, hi: int) -> bytes:
        """Return ``MTH`` of the non-empty leaf range ``[lo, hi)``, from stored subtrees.

        Requires ``lo`` to be a multiple of the largest power of two not above ``hi - lo``,
        which holds for every subtree the RFC recursion visits. The range is then tiled by
        aligned complete subtrees, largest first, and their roots are folded from the right,
        which is how the RFC's split rule nests them.
        """
        parts: list[bytes] = []
        count = hi - lo
        while count:  # one stored subtree per set bit of count, largest first
            level = count.bit_length() - 1
            parts.append(self._node(level, lo >> level))
            lo += 1 << level
            count -= 1 << level
        result = parts.pop()
        while parts:
            result = _sha256(_NODE_PREFIX + parts.pop() + result).digest()
        return result


def _split(count: int) -> int:
    """Return the largest power of two strictly smaller than ``count`` (``count >= 2``)."""
    return 1 << ((count - 1).bit_length() - 1)


def _prefix_tree(leaf_hashes: Sequence[bytes], size: int) -> MerkleTree:
    check_count(size, "size")
    if size > len(leaf_hashes):
        raise InvalidProofError(f"size {size} is above the number of leaves {len(leaf_hashes)}")
    return MerkleTree.from_leaf_hashes(islice(leaf_hashes, size))


def root(leaf_hashes: Sequence[bytes]) -> bytes:
    """Return RFC 9162 ``MTH`` of the leaves whose hashes are ``leaf_hashes``, in order.

    ``root([])`` is :data:`~agent_saga.proofs._merkle.EMPTY_ROOT`.

    Raises:
        InvalidProofError: some element is not a 32-byte ``bytes``.
    """
    return MerkleTree.from_leaf_hashes(leaf_hashes).root()


def inclusion_proof(index: int, size: int, leaf_hashes: Sequence[bytes]) -> list[bytes]:
    """Return the inclusion proof of leaf ``index`` in the tree of the first ``size`` leaves.

    Hashes every one of those leaves; to serve many proofs, keep a :class:`MerkleTree`.

    Raises:
        InvalidProofError: ``size > len(leaf_hashes)``, ``index >= size``, or a bad hash.
    """
    return _prefix_tree(leaf_hashes, size).inclusion_proof(index)


def consistency_proof(size1: int, size2: int, leaf_hashes: Sequence[bytes]) -> list[bytes]:
    """Return the consistency proof from the first ``size1`` to the first ``size2`` leaves.

    Hashes every one of the first ``size2`` leaves; to serve many proofs, keep a
    :class:`MerkleTree`.

    Raises:
        InvalidProofError: ``size2 > len(leaf_hashes)``, ``size1 == 0``, ``size1 > size2``,
            or a bad hash.
    """
    return _prefix_tree(leaf_hashes, size2).consistency_proof(size1)
