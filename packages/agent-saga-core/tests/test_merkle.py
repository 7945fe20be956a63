"""RFC 9162 Merkle tree: agreement with a reference written from the RFC text, known answers
from transparency-dev/merkle, the no-duplication rule, and the verifiers' refusals."""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agent_saga._errors import AgentSagaError
from agent_saga.proofs._merkle import (
    EMPTY_ROOT,
    HASH_SIZE,
    InvalidProofError,
    ProofError,
    RootMismatchError,
    leaf_hash,
    node_hash,
    root_from_consistency_proof,
    root_from_inclusion_proof,
    verify_consistency,
    verify_inclusion,
)
from agent_saga.proofs._tree import MerkleTree, consistency_proof, inclusion_proof, root

VECTORS = Path(__file__).parent / "vectors" / "rfc6962_transparency_dev.json"

# --- Reference implementation, transcribed from RFC 9162 section 2.1 -------------------------
# Deliberately naive: recursion over list slices, hashlib called directly, nothing shared with
# the implementation under test.


def ref_largest_power_below(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def ref_mth(leaves: list[bytes]) -> bytes:
    """MTH(D[n]) of RFC 9162 section 2.1.1."""
    n = len(leaves)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return hashlib.sha256(b"\x00" + leaves[0]).digest()
    k = ref_largest_power_below(n)
    return hashlib.sha256(b"\x01" + ref_mth(leaves[:k]) + ref_mth(leaves[k:])).digest()


def ref_path(m: int, leaves: list[bytes]) -> list[bytes]:
    """PATH(m, D[n]) of RFC 9162 section 2.1.3.1."""
    n = len(leaves)
    if n == 1:
        return []
    k = ref_largest_power_below(n)
    if m < k:
        return [*ref_path(m, leaves[:k]), ref_mth(leaves[k:])]
    return [*ref_path(m - k, leaves[k:]), ref_mth(leaves[:k])]


def ref_subproof(m: int, leaves: list[bytes], b: bool) -> list[bytes]:
    """SUBPROOF(m, D[n], b) of RFC 9162 section 2.1.4.1."""
    n = len(leaves)
    if m == n:
        return [] if b else [ref_mth(leaves)]
    k = ref_largest_power_below(n)
    if m <= k:
        return [*ref_subproof(m, leaves[:k], b), ref_mth(leaves[k:])]
    return [*ref_subproof(m - k, leaves[k:], False), ref_mth(leaves[:k])]


def ref_proof(m: int, leaves: list[bytes]) -> list[bytes]:
    """PROOF(m, D[n]) of RFC 9162 section 2.1.4.1, for 0 < m <= n."""
    return ref_subproof(m, leaves, True)


def data_leaves(count: int, salt: bytes = b"") -> list[bytes]:
    return [salt + i.to_bytes(4, "big") for i in range(count)]


def hashes_of(leaves: list[bytes]) -> list[bytes]:
    return [leaf_hash(leaf) for leaf in leaves]


# --- Hash primitives ----------------------------------------------------------------------------


def test_empty_root_is_sha256_of_empty_string() -> None:
    assert hashlib.sha256(b"").digest() == EMPTY_ROOT
    assert root([]) == EMPTY_ROOT
    assert MerkleTree().root() == EMPTY_ROOT


def test_leaf_and_node_hash_use_the_rfc_prefixes() -> None:
    left, right = leaf_hash(b"Hello"), leaf_hash(b"World")
    assert left == hashlib.sha256(b"\x00Hello").digest()
    assert node_hash(left, right) == hashlib.sha256(b"\x01" + left + right).digest()
    assert len(left) == HASH_SIZE


def test_interior_node_is_not_a_leaf_of_its_children_concatenated() -> None:
    # Second-preimage resistance (transparency-dev TestRFC6962HasherCollisions).
    left, right = leaf_hash(b"Hello"), leaf_hash(b"World")
    assert node_hash(left, right) != leaf_hash(left + right)
    assert node_hash(left, right) != node_hash(right, left)
    assert root([left, right]) != root([leaf_hash(left + right)])


@pytest.mark.parametrize(
    ("left", "right"),
    [(b"N123", bytes(32)), (bytes(32), b"N456"), (bytes(31), bytes(32)), (bytes(32), bytes(33))],
)
def test_node_hash_refuses_children_that_are_not_32_bytes(left: bytes, right: bytes) -> None:
    with pytest.raises(InvalidProofError, match="must be 32 bytes"):
        node_hash(left, right)


def test_errors_share_one_base_that_is_a_value_error_and_an_agent_saga_error() -> None:
    for cls in (InvalidProofError, RootMismatchError):
        assert issubclass(cls, ProofError)
    assert issubclass(ProofError, ValueError)
    assert issubclass(ProofError, AgentSagaError)
    err = RootMismatchError(b"\x01" * 32, b"\x02" * 32)
    assert (err.expected, err.calculated) == (b"\x01" * 32, b"\x02" * 32)
    assert "0101" in str(err)


# --- Known answers ------------------------------------------------------------------------------


def load_vectors() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(VECTORS.read_text(encoding="utf-8"))
    return loaded


def vector_leaf_hashes() -> list[bytes]:
    return [leaf_hash(bytes.fromhex(h)) for h in load_vectors()["leaves_hex"]]


def test_vector_leaves_are_the_eight_transparency_dev_inputs() -> None:
    leaves = [bytes.fromhex(h) for h in load_vectors()["leaves_hex"]]
    assert leaves == [
        b"",
        b"\x00",
        b"\x10",
        b"\x20\x21",
        b"\x30\x31",
        b"\x40\x41\x42\x43",
        b"\x50\x51\x52\x53\x54\x55\x56\x57",
        bytes(range(0x60, 0x70)),
    ]


def test_known_hashes() -> None:
    known = load_vectors()["hashes"]
    assert EMPTY_ROOT.hex() == known["empty_root"]
    assert leaf_hash(b"").hex() == known["leaf_hash_of_empty"]
    assert leaf_hash(b"L123456").hex() == known["leaf_hash_of_L123456"]


def test_known_roots_for_every_size() -> None:
    expected = load_vectors()["roots_by_size"]
    hashes = vector_leaf_hashes()
    assert len(expected) == 9
    tree = MerkleTree()
    assert tree.root().hex() == expected[0]
    for size in range(1, 9):
        tree.append(hashes[size - 1])
        assert tree.root().hex() == expected[size]
        assert root(hashes[:size]).hex() == expected[size]
        assert (
            ref_mth([bytes.fromhex(h) for h in load_vectors()["leaves_hex"][:size]]).hex()
            == (expected[size])
        )
    assert [tree.root(size).hex() for size in range(9)] == expected
    assert expected[8] == "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328"


def test_known_node_hashes_are_roots_of_complete_subtrees() -> None:
    levels = load_vectors()["node_hashes_by_level"]
    hashes = vector_leaf_hashes()
    for level, nodes in enumerate(levels):
        width = 1 << level
        assert len(nodes) == 8 // width
        for i, expected in enumerate(nodes):
            assert root(hashes[i * width : (i + 1) * width]).hex() == expected


@pytest.mark.parametrize("case", range(5))
def test_known_inclusion_proofs(case: int) -> None:
    vector = load_vectors()["inclusion_proofs"][case]
    index, size = vector["index"], vector["size"]
    proof = [bytes.fromhex(h) for h in vector["proof"]]
    hashes = vector_leaf_hashes()
    expected_root = bytes.fromhex(load_vectors()["roots_by_size"][size])
    assert inclusion_proof(index, size, hashes) == proof
    assert MerkleTree.from_leaf_hashes(hashes).inclusion_proof(index, size) == proof
    assert root_from_inclusion_proof(hashes[index], index, size, proof) == expected_root
    verify_inclusion(hashes[index], index, size, proof, expected_root)


@pytest.mark.parametrize("case", range(5))
def test_known_consistency_proofs(case: int) -> None:
    vector = load_vectors()["consistency_proofs"][case]
    size1, size2 = vector["size1"], vector["size2"]
    proof = [bytes.fromhex(h) for h in vector["proof"]]
    roots = [bytes.fromhex(h) for h in load_vectors()["roots_by_size"]]
    hashes = vector_leaf_hashes()
    assert consistency_proof(size1, size2, hashes) == proof
    assert MerkleTree.from_leaf_hashes(hashes).consistency_proof(size1, size2) == proof
    assert root_from_consistency_proof(size1, size2, proof, roots[size1]) == roots[size2]
    verify_consistency(size1, size2, proof, roots[size1], roots[size2])


# --- No duplication of odd nodes (the Bitcoin-style failure mode) -------------------------------


def test_duplicating_the_last_leaf_changes_the_root() -> None:
    a, b, c = hashes_of([b"a", b"b", b"c"])
    assert root([a, b, c]) != root([a, b, c, c])
    assert root([a, b, c]) == node_hash(node_hash(a, b), c)
    # The root a duplicating tree would give for [a, b, c] is the root of [a, b, c, c] here.
    assert root([a, b, c]) != node_hash(node_hash(a, b), node_hash(c, c))


@pytest.mark.parametrize("size", [3, 5, 6, 7, 9, 11, 100])
def test_padding_an_odd_level_by_duplication_never_gives_the_same_root(size: int) -> None:
    hashes = hashes_of(data_leaves(size))
    padded = [*hashes, hashes[-1]]
    assert root(hashes) != root(padded)
    assert MerkleTree.from_leaf_hashes(padded).root(size) == root(hashes)


# --- Agreement with the reference ---------------------------------------------------------------


@pytest.mark.parametrize("size", range(1, 65))
def test_agrees_with_reference_for_every_index_and_size_pair(size: int) -> None:
    leaves = data_leaves(size)
    hashes = hashes_of(leaves)
    tree = MerkleTree.from_leaf_hashes(hashes)
    tree_root = tree.root()
    assert tree_root == ref_mth(leaves) == root(hashes)
    for index in range(size):
        proof = tree.inclusion_proof(index)
        assert proof == ref_path(index, leaves)
        assert root_from_inclusion_proof(hashes[index], index, size, proof) == tree_root
        verify_inclusion(hashes[index], index, size, proof, tree_root)
    for size1 in range(1, size + 1):
        proof = tree.consistency_proof(size1)
        assert proof == ref_proof(size1, leaves)
        assert root_from_consistency_proof(size1, size, proof, tree.root(size1)) == tree_root
        verify_consistency(size1, size, proof, tree.root(size1), tree_root)


def test_agrees_with_reference_at_sampled_sizes_up_to_10000() -> None:
    rng = random.Random(9162)
    sizes = [65, 127, 128, 129, 1000, 1023, 1024, 4097, 10_000, *rng.sample(range(2, 10_001), 6)]
    largest = max(sizes)
    leaves = data_leaves(largest, salt=b"sampled")
    tree = MerkleTree.from_leaf_hashes(hashes_of(leaves))
    checked = 0
    for size in sizes:
        prefix = leaves[:size]
        size_root = tree.root(size)
        assert size_root == ref_mth(prefix)
        indices = {0, size - 1, size // 2, *rng.sample(range(size), 3)}
        for index in indices:
            proof = tree.inclusion_proof(index, size)
            assert proof == ref_path(index, prefix)
            verify_inclusion(leaf_hash(prefix[index]), index, size, proof, size_root)
            checked += 1
        for size1 in {1, size - 1 or 1, size // 2 or 1, *rng.sample(range(1, size + 1), 3)}:
            proof = tree.consistency_proof(size1, size)
            assert proof == ref_proof(size1, prefix)
            verify_consistency(size1, size, proof, tree.root(size1), size_root)
            checked += 1
    assert checked >= 8 * len(sizes)


def test_pure_functions_take_a_prefix_of_the_leaves() -> None:
    hashes = hashes_of(data_leaves(20))
    tree = MerkleTree.from_leaf_hashes(hashes)
    assert inclusion_proof(3, 11, hashes) == tree.inclusion_proof(3, 11)
    assert consistency_proof(4, 11, hashes) == tree.consistency_proof(4, 11)
    with pytest.raises(InvalidProofError, match="above the number of leaves"):
        inclusion_proof(0, 21, hashes)
    with pytest.raises(InvalidProofError, match="above the number of leaves"):
        consistency_proof(1, 21, hashes)


# --- The incremental tree -----------------------------------------------------------------------


def test_append_extend_and_mixed_growth_store_the_same_tree() -> None:
    hashes = hashes_of(data_leaves(300))
    one_by_one = MerkleTree()
    for expected_index, value in enumerate(hashes):
        assert one_by_one.append(value) == expected_index
    mixed = MerkleTree()
    rng = random.Random(6962)
    position = 0
    while position < len(hashes):
        step = rng.randint(0, 17)
        mixed.extend(hashes[position : position + step])
        position += step
    bulk = MerkleTree.from_leaf_hashes(iter(hashes))
    for tree in (one_by_one, mixed, bulk):
        assert len(tree) == tree.size == 300
        assert [tree.root(size) for size in range(301)] == [
            ref_mth(data_leaves(size)) for size in range(301)
        ]
        assert [tree.leaf_hash(i) for i in range(300)] == hashes
    assert repr(bulk) == "MerkleTree(size=300)"


def test_past_roots_and_proofs_do_not_change_as_the_tree_grows() -> None:
    hashes = hashes_of(data_leaves(100))
    tree = MerkleTree.from_leaf_hashes(hashes[:37])
    before = (tree.root(), tree.inclusion_proof(5), tree.consistency_proof(20))
    tree.extend(hashes[37:])
    assert (tree.root(37), tree.inclusion_proof(5, 37), tree.consistency_proof(20, 37)) == before
    verify_consistency(37, 100, tree.consistency_proof(37), before[0], tree.root())


@pytest.mark.parametrize(
    "bad", [b"", bytes(31), bytes(33), "a" * 32, bytearray(32), None, 7], ids=repr
)
def test_tree_refuses_bad_leaf_hashes_and_stays_unchanged(bad: object) -> None:
    hashes = hashes_of(data_leaves(5))
    tree = MerkleTree.from_leaf_hashes(hashes)
    before = tree.root()
    with pytest.raises(InvalidProofError, match="leaf hash"):
        tree.append(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidProofError, match="leaf hash 2"):
        tree.extend([hashes[0], hashes[1], bad])  # type: ignore[list-item]
    with pytest.raises(InvalidProofError):
        root([*hashes, bad])  # type: ignore[list-item]
    assert (tree.size, tree.root()) == (5, before)


def test_tree_refuses_sizes_and_indices_outside_the_tree() -> None:
    tree = MerkleTree.from_leaf_hashes(hashes_of(data_leaves(10)))
    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: tree.root(11), "above the tree size"),
        (lambda: tree.root(-1), "non-negative integer"),
        (lambda: tree.inclusion_proof(10), "not below size"),
        (lambda: tree.inclusion_proof(3, 3), "not below size"),
        (lambda: tree.inclusion_proof(0, 11), "above the tree size"),
        (lambda: tree.inclusion_proof(-1), "non-negative integer"),
        (lambda: tree.consistency_proof(0), "empty tree is meaningless"),
        (lambda: tree.consistency_proof(0, 0), "empty tree is meaningless"),
        (lambda: tree.consistency_proof(5, 4), "larger than size2"),
        (lambda: tree.consistency_proof(1, 11), "above the tree size"),
        (lambda: tree.leaf_hash(10), "not below size"),
        (lambda: tree.root(True), "non-negative integer"),  # a bool is not a size
    ]
    for call, message in cases:
        with pytest.raises(InvalidProofError, match=message):
            call()
    assert tree.consistency_proof(4, 4) == []
    assert tree.consistency_proof(10) == []


# --- Verifier refusals --------------------------------------------------------------------------

H = [leaf_hash(bytes([i])) for i in range(4)]
ROOT4 = root(H)


def test_single_leaf_tree_root_is_the_leaf_hash_and_needs_no_proof() -> None:
    verify_inclusion(H[0], 0, 1, [], H[0])
    with pytest.raises(RootMismatchError):
        verify_inclusion(H[0], 0, 1, [], H[1])
    with pytest.raises(InvalidProofError, match="proof too long"):
        verify_inclusion(H[0], 0, 1, [H[1]], node_hash(H[0], H[1]))


@pytest.mark.parametrize(
    ("index", "size"), [(0, 0), (1, 0), (1, 1), (2, 1), (4, 4), (-1, 4), (0, -1)]
)
def test_inclusion_refuses_index_not_below_size(index: int, size: int) -> None:
    with pytest.raises(InvalidProofError):
        root_from_inclusion_proof(H[0], index, size, [])
    with pytest.raises(InvalidProofError):
        verify_inclusion(H[0], index, size, [], EMPTY_ROOT)


@pytest.mark.parametrize("bad", [b"", bytes(31), bytes(33), "x" * 32, None], ids=repr)
def test_inclusion_length_checks_every_hash(bad: Any) -> None:
    proof = MerkleTree.from_leaf_hashes(H).inclusion_proof(1)
    with pytest.raises(InvalidProofError, match="leaf hash"):
        verify_inclusion(bad, 1, 4, proof, ROOT4)
    with pytest.raises(InvalidProofError, match="root"):
        verify_inclusion(H[1], 1, 4, proof, bad)
    for position in range(len(proof)):
        mutated = list(proof)
        mutated[position] = bad
        with pytest.raises(InvalidProofError, match=rf"proof\[{position}\]"):
            verify_inclusion(H[1], 1, 4, mutated, ROOT4)


@pytest.mark.parametrize("bad", [1.0, True, "3", None], ids=repr)
def test_verifiers_refuse_sizes_and_indices_that_are_not_integers(bad: Any) -> None:
    proof = MerkleTree.from_leaf_hashes(H).inclusion_proof(1)
    with pytest.raises(InvalidProofError, match="non-negative integer"):
        verify_inclusion(H[1], bad, 4, proof, ROOT4)
    with pytest.raises(InvalidProofError, match="non-negative integer"):
        verify_inclusion(H[1], 1, bad, proof, ROOT4)
    with pytest.raises(InvalidProofError, match="non-negative integer"):
        verify_consistency(bad, 4, [], ROOT4, ROOT4)
    with pytest.raises(InvalidProofError, match="non-negative integer"):
        verify_consistency(2, bad, [], ROOT4, ROOT4)


def test_consistency_from_the_empty_tree_is_refused() -> None:
    for size2, proof in [(0, []), (1, []), (4, []), (4, [ROOT4])]:
        with pytest.raises(InvalidProofError, match="empty tree is meaningless"):
            verify_consistency(0, size2, proof, EMPTY_ROOT, ROOT4 if size2 else EMPTY_ROOT)
        with pytest.raises(InvalidProofError, match="empty tree is meaningless"):
            root_from_consistency_proof(0, size2, proof, EMPTY_ROOT)


def test_consistency_refuses_time_travel() -> None:
    with pytest.raises(InvalidProofError, match="larger than size2"):
        verify_consistency(4, 3, [], ROOT4, root(H[:3]))
    with pytest.raises(InvalidProofError, match="larger than size2"):
        root_from_consistency_proof(2, 1, [H[0]], ROOT4)


def test_consistency_between_equal_sizes_needs_an_empty_proof_and_equal_roots() -> None:
    verify_consistency(4, 4, [], ROOT4, ROOT4)
    assert root_from_consistency_proof(4, 4, [], ROOT4) == ROOT4
    with pytest.raises(InvalidProofError, match="requires an empty proof"):
        verify_consistency(4, 4, [ROOT4], ROOT4, ROOT4)
    with pytest.raises(RootMismatchError):
        verify_consistency(4, 4, [], ROOT4, root(H[:3]))


def test_consistency_between_different_sizes_needs_a_proof() -> None:
    with pytest.raises(InvalidProofError, match="empty consistency proof"):
        verify_consistency(2, 4, [], root(H[:2]), ROOT4)


@pytest.mark.parametrize("bad", [b"", bytes(31), bytes(33), "x" * 32, None], ids=repr)
def test_consistency_length_checks_every_hash(bad: Any) -> None:
    proof = MerkleTree.from_leaf_hashes(H).consistency_proof(3)
    root3 = root(H[:3])
    with pytest.raises(InvalidProofError, match="root1"):
        verify_consistency(3, 4, proof, bad, ROOT4)
    with pytest.raises(InvalidProofError, match="root2"):
        verify_consistency(3, 4, proof, root3, bad)
    for position in range(len(proof)):
        mutated = list(proof)
        mutated[position] = bad
        with pytest.raises(InvalidProofError, match=rf"proof\[{position}\]"):
            verify_consistency(3, 4, mutated, root3, ROOT4)


def test_consistency_reports_which_root_mismatched() -> None:
    proof = MerkleTree.from_leaf_hashes(H).consistency_proof(3)
    root3 = root(H[:3])
    with pytest.raises(RootMismatchError, match="root1 mismatch") as first:
        verify_consistency(3, 4, proof, root(H[:2]), ROOT4)
    assert first.value.expected == root(H[:2])
    with pytest.raises(RootMismatchError, match="root2 mismatch") as second:
        verify_consistency(3, 4, proof, root3, root3)
    assert second.value.calculated == ROOT4


def test_an_inclusion_proof_does_not_bind_the_tree_size_on_its_own() -> None:
    # PATH(0, D[4]) also has the shape of PATH(0, D[3]), so the same (leaf, proof, root)
    # verifies under size 3. Only the pairing of size and root in a signed checkpoint binds the
    # size, which is why callers must take both from one checkpoint. Against the real root of
    # size 3 the proof fails.
    proof = MerkleTree.from_leaf_hashes(H).inclusion_proof(0)
    verify_inclusion(H[0], 0, 4, proof, ROOT4)
    verify_inclusion(H[0], 0, 3, proof, ROOT4)
    with pytest.raises(RootMismatchError):
        verify_inclusion(H[0], 0, 3, proof, root(H[:3]))
