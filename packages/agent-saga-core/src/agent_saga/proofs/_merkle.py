"""RFC 9162 Merkle tree hashing and proof verification, as pure functions over hashes.

The tree is the one of RFC 9162 section 2.1 (identical to RFC 6962): SHA-256, leaf hashes
``SHA-256(0x00 || leaf)``, interior nodes ``SHA-256(0x01 || left || right)``, the split point of
``n`` leaves is the largest power of two smaller than ``n``, and an odd node is never duplicated
(so ``root([a, b, c]) != root([a, b, c, c])``). The root of the empty tree is ``SHA-256(b"")``.

Proofs are lists of 32-byte hashes ordered from the leaf level upwards, exactly as RFC 9162's
``PATH`` and ``PROOF`` produce them, so they interoperate with transparency-dev/merkle, whose
names this module follows.

Verification never trusts its input: every hash is checked to be exactly 32 bytes, sizes and
indices must be non-negative integers, and the proof length must be exact. Every refusal is a
:class:`ProofError`: :class:`InvalidProofError` when the inputs cannot describe a proof at all,
:class:`RootMismatchError` when a well-formed proof leads to a different root. Nothing else is
raised for any value of the documented types.

Building trees and producing proofs lives in :mod:`agent_saga.proofs._tree`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from .._errors import AgentSagaError

__all__ = [
    "EMPTY_ROOT",
    "HASH_SIZE",
    "InvalidProofError",
    "ProofError",
    "RootMismatchError",
    "leaf_hash",
    "node_hash",
    "root_from_consistency_proof",
    "root_from_inclusion_proof",
    "verify_consistency",
    "verify_inclusion",
]

HASH_SIZE = 32
"""Length in bytes of every hash in the tree (SHA-256)."""

EMPTY_ROOT = hashlib.sha256(b"").digest()
"""``MTH({})``: the root of the tree with no leaves, ``SHA-256`` of the empty string."""

_LEAF_PREFIX = b"\x00"
_NODE_PREFIX = b"\x01"
_sha256 = hashlib.sha256


class ProofError(AgentSagaError, ValueError):
    """Base class of every Merkle refusal: a proof, hash, index or size was rejected.

    After this is raised nothing has been accepted; the caller must treat the claim as unproven.
    """


class InvalidProofError(ProofError):
    """The inputs cannot form a valid proof, whatever the hashes are.

    Raised for a hash that is not exactly 32 bytes, a negative or non-integer size or index,
    ``index >= size``, a consistency proof from ``size1 == 0`` or with ``size1 > size2``, a
    non-empty proof where an empty one is required, and a proof of the wrong length. Also raised
    when a proof is *requested* for such parameters.
    """


class RootMismatchError(ProofError):
    """A well-formed proof leads to a root other than the expected one.

    The message names the root that mismatched (``root``, or ``root1`` / ``root2`` for a
    consistency proof).

    Attributes:
        expected: the root the caller supplied.
        calculated: the root the proof leads to.
    """

    def __init__(self, expected: bytes, calculated: bytes, what: str = "root") -> None:
        super().__init__(
            f"{what} mismatch: proof leads to {calculated.hex()}, expected {expected.hex()}"
        )
        self.expected = expected
        self.calculated = calculated


def check_hash(value: object, what: str) -> bytes:
    """Return ``value`` if it is a 32-byte ``bytes`` object, else raise :class:`InvalidProofError`.

    Args:
        value: the candidate hash (from untrusted input, so any object is accepted).
        what: how to name the value in the error message.
    """
    if not isinstance(value, bytes) or len(value) != HASH_SIZE:
        shown = f"{len(value)} bytes" if isinstance(value, bytes) else type(value).__name__
        raise InvalidProofError(f"{what} must be {HASH_SIZE} bytes, got {shown}")
    return value


def check_count(value: object, what: str) -> int:
    """Return ``value`` if it is a non-negative ``int`` (not a ``bool``), else raise.

    Raises:
        InvalidProofError: ``value`` is not a non-negative integer.
    """
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidProofError(f"{what} must be a non-negative integer, got {value!r}")
    return value


def _check_proof(proof: Sequence[bytes]) -> None:
    for position, element in enumerate(proof):
        check_hash(element, f"proof[{position}]")


def leaf_hash(data: bytes) -> bytes:
    """Return the RFC 9162 hash of one leaf: ``SHA-256(0x00 || data)``.

    The ``0x00`` prefix keeps a leaf hash from ever equalling an interior node hash, which is
    what makes the tree second-preimage resistant.
    """
    return _sha256(_LEAF_PREFIX + bytes(data)).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """Return the RFC 9162 hash of an interior node: ``SHA-256(0x01 || left || right)``.

    Raises:
        InvalidProofError: ``left`` or ``right`` is not a 32-byte hash.
    """
    return _sha256(
        _NODE_PREFIX + check_hash(left, "left child") + check_hash(right, "right child")
    ).digest()


def root_from_inclusion_proof(
    leaf_hash: bytes, index: int, size: int, proof: Sequence[bytes]
) -> bytes:
    """Return the root that ``proof`` implies for leaf ``index`` of a tree of ``size`` leaves.

    This is the verification walk of RFC 9162 section 2.1.3.2 without its final comparison.
    The result is only as trustworthy as the root it is later compared with; prefer
    :func:`verify_inclusion`.

    Args:
        leaf_hash: the leaf's hash (:func:`leaf_hash` of its data), 32 bytes.
        index: the leaf's 0-based position; requires ``index < size``.
        size: the number of leaves in the tree the proof is for.
        proof: the audit path, leaf level first.

    Raises:
        InvalidProofError: a hash is not 32 bytes, ``index``/``size`` are not non-negative
            integers, ``index >= size``, or the proof length is wrong for ``(index, size)``.
    """
    check_count(index, "index")
    check_count(size, "size")
    if index >= size:
        raise InvalidProofError(f"index {index} is not below size {size}")
    current = check_hash(leaf_hash, "leaf hash")
    _check_proof(proof)
    fn, sn = index, size - 1
    for position, sibling in enumerate(proof):
        if sn == 0:
            raise InvalidProofError(
                f"proof too long for index {index} in size {size}: "
                f"{len(proof)} hashes, {position} needed"
            )
        if fn & 1 or fn == sn:
            current = _sha256(_NODE_PREFIX + sibling + current).digest()
            while fn and not fn & 1:  # on the right border: skip levels with no sibling
                fn >>= 1
                sn >>= 1
        else:
            current = _sha256(_NODE_PREFIX + current + sibling).digest()
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise InvalidProofError(
            f"proof too short for index {index} in size {size}: {len(proof)} hashes"
        )
    return current


def verify_inclusion(
    leaf_hash: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes
) -> None:
    """Check that ``proof`` shows leaf ``index`` of the tree of ``size`` leaves has ``leaf_hash``.

    Returns normally only if the proof is well formed and leads exactly to ``root``. An inclusion
    proof binds the leaf to ``root``; that ``root`` belongs to ``size`` must come from elsewhere
    (a signed checkpoint carries both).

    Raises:
        InvalidProofError: see :func:`root_from_inclusion_proof`; also when ``root`` is not a
            32-byte hash.
        RootMismatchError: the proof is well formed but leads to another root.
    """
    expected = check_hash(root, "root")
    calculated = root_from_inclusion_proof(leaf_hash, index, size, proof)
    if calculated != expected:
        raise RootMismatchError(expected, calculated)


def root_from_consistency_proof(
    size1: int, size2: int, proof: Sequence[bytes], root1: bytes
) -> bytes:
    """Return the root of the size-``size2`` tree that ``proof`` extends ``root1`` into.

    This is the walk of RFC 9162 section 2.1.4.2: it recomputes both roots from the proof,
    checks the first against ``root1`` and returns the second, so a caller holding a trusted
    ``root1`` learns the only ``root2`` the proof can show to be an append-only extension.

    Args:
        size1: size of the older tree; requires ``0 < size1 <= size2``.
        size2: size of the newer tree.
        proof: the consistency proof; must be empty exactly when ``size1 == size2``.
        root1: root of the older tree, 32 bytes.

    Raises:
        InvalidProofError: a hash is not 32 bytes, ``size1 == 0`` (a proof from the empty tree
            proves nothing), ``size1 > size2``, a non-empty proof for ``size1 == size2``, an
            empty proof for ``size1 < size2``, or a proof of the wrong length.
        RootMismatchError: the proof is well formed but does not lead to ``root1``.
    """
    check_count(size1, "size1")
    check_count(size2, "size2")
    check_hash(root1, "root1")
    _check_proof(proof)
    if size1 == 0:
        raise InvalidProofError("a consistency proof from the empty tree is meaningless")
    if size1 > size2:
        raise InvalidProofError(f"size1 {size1} is larger than size2 {size2}")
    if size1 == size2:
        if proof:
            raise InvalidProofError(f"size1 == size2 == {size1} requires an empty proof")
        return root1
    if not proof:
        raise InvalidProofError(f"empty consistency proof for sizes {size1} < {size2}")
    # RFC 9162 2.1.4.2 step 2: when size1 is a power of two, the old root is the seed.
    path = [root1, *proof] if size1 & (size1 - 1) == 0 else list(proof)
    fn, sn = size1 - 1, size2 - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    first = second = path[0]
    for position, element in enumerate(path[1:], start=1):
        if sn == 0:
            raise InvalidProofError(
                f"consistency proof too long for sizes {size1} < {size2}: "
                f"{len(proof)} hashes, {position - len(path) + len(proof)} needed"
            )
        if fn & 1 or fn == sn:
            first = _sha256(_NODE_PREFIX + element + first).digest()
            second = _sha256(_NODE_PREFIX + element + second).digest()
            while fn and not fn & 1:  # on the right border: skip levels with no sibling
                fn >>= 1
                sn >>= 1
        else:
            second = _sha256(_NODE_PREFIX + second + element).digest()
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise InvalidProofError(
            f"consistency proof too short for sizes {size1} < {size2}: {len(proof)} hashes"
        )
    if first != root1:
        raise RootMismatchError(root1, first, what="root1")
    return second


def verify_consistency(
    size1: int, size2: int, proof: Sequence[bytes], root1: bytes, root2: bytes
) -> None:
    """Check that the tree ``(size2, root2)`` is an append-only extension of ``(size1, root1)``.

    Returns normally only if the proof is well formed, leads to ``root1`` and to ``root2``.
    For ``size1 == size2`` the proof must be empty and the roots equal.

    Raises:
        InvalidProofError: see :func:`root_from_consistency_proof`; also when ``root2`` is not
            a 32-byte hash.
        RootMismatchError: the proof is well formed but does not lead to ``root1`` or ``root2``.
    """
    expected = check_hash(root2, "root2")
    calculated = root_from_consistency_proof(size1, size2, proof, root1)
    if calculated != expected:
        raise RootMismatchError(expected, calculated, what="root2")
