"""Merkle proofs: every honest proof verifies, every mechanically mutated proof is refused with a
typed error, and arbitrary input never gets anything but a :class:`ProofError`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import pytest
from agent_saga.proofs._merkle import (
    EMPTY_ROOT,
    InvalidProofError,
    ProofError,
    RootMismatchError,
    leaf_hash,
    root_from_consistency_proof,
    verify_consistency,
    verify_inclusion,
)
from agent_saga.proofs._tree import MerkleTree, root
from hypothesis import given, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

FAST = settings(max_examples=150, derandomize=True, database=None, deadline=None)

# Distinct leaves make distinct subtree hashes, so a reordered or re-indexed proof cannot
# coincide with the honest one by accident.
TREE_SIZE = 160
LEAVES = [leaf_hash(b"leaf-" + i.to_bytes(4, "big")) for i in range(TREE_SIZE)]
TREE = MerkleTree.from_leaf_hashes(LEAVES)


def flip(value: bytes, bit: int) -> bytes:
    mutated = bytearray(value)
    mutated[bit // 8] ^= 1 << (bit % 8)
    return bytes(mutated)


@dataclass(frozen=True)
class Inclusion:
    leaf: bytes
    index: int
    size: int
    proof: tuple[bytes, ...]
    root: bytes

    def verify(self) -> None:
        verify_inclusion(self.leaf, self.index, self.size, self.proof, self.root)


@dataclass(frozen=True)
class Consistency:
    size1: int
    size2: int
    proof: tuple[bytes, ...]
    root1: bytes
    root2: bytes

    def verify(self) -> None:
        verify_consistency(self.size1, self.size2, self.proof, self.root1, self.root2)


Mutation = tuple[str, Callable[[], None], type[ProofError]]


def honest_inclusion(index: int, size: int) -> Inclusion:
    proof = tuple(TREE.inclusion_proof(index, size))
    return Inclusion(LEAVES[index], index, size, proof, TREE.root(size))


def honest_consistency(size1: int, size2: int) -> Consistency:
    proof = tuple(TREE.consistency_proof(size1, size2))
    return Consistency(size1, size2, proof, TREE.root(size1), TREE.root(size2))


def proof_mutations(
    proof: tuple[bytes, ...], extra: bytes
) -> Iterator[tuple[str, tuple[bytes, ...], type[ProofError]]]:
    """Mutations of a proof's elements that no verifier may accept, with the error they earn."""
    for position, element in enumerate(proof):
        for bit in (0, 7, 128, 255):
            mutated = (*proof[:position], flip(element, bit), *proof[position + 1 :])
            yield f"proof[{position}] bit {bit}", mutated, RootMismatchError
        for bad in (element[:31], element + b"\x00"):
            mutated = (*proof[:position], bad, *proof[position + 1 :])
            yield f"proof[{position}] {len(bad)} bytes", mutated, InvalidProofError
    for position in range(len(proof) - 1):
        swapped = (*proof[:position], proof[position + 1], proof[position], *proof[position + 2 :])
        yield f"swap {position},{position + 1}", swapped, RootMismatchError
    if proof:
        yield "truncated (last)", proof[:-1], InvalidProofError
        yield "truncated (first)", proof[1:], InvalidProofError
    yield "extended (appended)", (*proof, extra), InvalidProofError
    yield "extended (prepended)", (extra, *proof), InvalidProofError


def inclusion_mutations(claim: Inclusion) -> Iterator[Mutation]:
    """Every way to get an inclusion claim wrong, each bound to a verification call."""
    index, size = claim.index, claim.size
    for name, proof, error in proof_mutations(claim.proof, claim.root):
        yield name, replace(claim, proof=proof).verify, error
    for bit in (0, 255):
        yield (
            f"leaf bit {bit}",
            replace(claim, leaf=flip(claim.leaf, bit)).verify,
            RootMismatchError,
        )
        yield (
            f"root bit {bit}",
            replace(claim, root=flip(claim.root, bit)).verify,
            RootMismatchError,
        )
    yield "empty-tree root", replace(claim, root=EMPTY_ROOT).verify, RootMismatchError
    yield "another leaf", replace(claim, leaf=LEAVES[index + 1]).verify, RootMismatchError
    for other in {0, index - 1, index + 1, index ^ 1, index ^ 2, size - 1} - {index}:
        if 0 <= other < size:
            yield f"index {other}", replace(claim, index=other).verify, ProofError
    yield "index == size", replace(claim, index=size).verify, InvalidProofError
    # A proof does not bind the size by itself (see test_merkle), so a wrong size is checked
    # against the root the log really had at that size, plus the doubled and halved sizes
    # transparency-dev probes against the original root.
    for other in (size - 1, size + 1, 2 * size):
        if index < other <= TREE_SIZE:
            wrong = replace(claim, size=other, root=TREE.root(other))
            yield f"size {other} with its root", wrong.verify, ProofError
    for other in (2 * size, size // 2):
        if index < other:
            yield f"size {other}", replace(claim, size=other).verify, ProofError


def consistency_mutations(claim: Consistency) -> Iterator[Mutation]:
    """Every way to get a consistency claim (size1 < size2) wrong, bound to a verification."""
    size1, size2 = claim.size1, claim.size2
    for name, proof, error in proof_mutations(claim.proof, claim.root1):
        yield name, replace(claim, proof=proof).verify, error
    yield "empty proof", replace(claim, proof=()).verify, InvalidProofError
    for bit in (0, 255):
        yield (
            f"root1 bit {bit}",
            replace(claim, root1=flip(claim.root1, bit)).verify,
            RootMismatchError,
        )
        yield (
            f"root2 bit {bit}",
            replace(claim, root2=flip(claim.root2, bit)).verify,
            RootMismatchError,
        )
    yield "swapped roots", replace(claim, root1=claim.root2, root2=claim.root1).verify, ProofError
    for other in {size1 - 1, size1 + 1, size1 ^ 2} - {size1}:
        if other <= size2:
            yield f"size1 {other}", replace(claim, size1=other).verify, ProofError
    for other in (size2 - 1, size2 + 1):
        if size1 <= other <= TREE_SIZE and other != size2:
            wrong = replace(claim, size2=other, root2=TREE.root(other))
            yield f"size2 {other} with its root", wrong.verify, ProofError
    for other in (2 * size2, size2 // 2):
        yield f"size2 {other}", replace(claim, size2=other).verify, ProofError


def check_all_refused(mutations: Iterator[Mutation]) -> int:
    """Run every mutation; fail naming the first one that verifies or raises the wrong error."""
    count = 0
    for name, verify, error in mutations:
        try:
            verify()
        except error:
            count += 1
            continue
        except Exception as unexpected:
            unexpected.add_note(f"mutation: {name}")
            raise
        pytest.fail(f"mutation {name!r} verified")
    return count


# --- Exhaustive mechanical mutations over small trees -------------------------------------------


@pytest.mark.parametrize("size", range(1, 41))
def test_every_mutated_inclusion_proof_is_refused(size: int) -> None:
    checked = 0
    for index in range(size):
        claim = honest_inclusion(index, size)
        claim.verify()
        checked += check_all_refused(inclusion_mutations(claim))
    assert checked >= 9 * size


@pytest.mark.parametrize("size2", range(2, 41))
def test_every_mutated_consistency_proof_is_refused(size2: int) -> None:
    checked = 0
    for size1 in range(1, size2):
        claim = honest_consistency(size1, size2)
        claim.verify()
        checked += check_all_refused(consistency_mutations(claim))
    assert checked >= 15 * (size2 - 1)


# --- Hypothesis properties ----------------------------------------------------------------------


@st.composite
def index_and_size(draw: st.DrawFn) -> tuple[int, int]:
    size = draw(st.integers(1, TREE_SIZE - 1))
    return draw(st.integers(0, size - 1)), size


@st.composite
def size_pair(draw: st.DrawFn) -> tuple[int, int]:
    size2 = draw(st.integers(2, TREE_SIZE - 1))
    return draw(st.integers(1, size2 - 1)), size2


@FAST
@given(index_and_size(), st.data())
def test_honest_inclusion_proofs_verify_and_mutations_fail(
    position: tuple[int, int], data: st.DataObject
) -> None:
    claim = honest_inclusion(*position)
    claim.verify()
    name, verify, error = data.draw(st.sampled_from(list(inclusion_mutations(claim))))
    note(name)
    with pytest.raises(error):
        verify()


@FAST
@given(size_pair(), st.data())
def test_honest_consistency_proofs_verify_and_mutations_fail(
    sizes: tuple[int, int], data: st.DataObject
) -> None:
    claim = honest_consistency(*sizes)
    claim.verify()
    assert root_from_consistency_proof(claim.size1, claim.size2, claim.proof, claim.root1) == (
        claim.root2
    )
    name, verify, error = data.draw(st.sampled_from(list(consistency_mutations(claim))))
    note(name)
    with pytest.raises(error):
        verify()


@FAST
@given(st.integers(1, 5000), st.data())
def test_honest_proofs_verify_in_larger_trees(size: int, data: st.DataObject) -> None:
    tree = MerkleTree.from_leaf_hashes(leaf_hash(i.to_bytes(4, "big")) for i in range(size))
    index = data.draw(st.integers(0, size - 1))
    size1 = data.draw(st.integers(1, size))
    verify_inclusion(tree.leaf_hash(index), index, size, tree.inclusion_proof(index), tree.root())
    proof = tree.consistency_proof(size1)
    verify_consistency(size1, size, proof, tree.root(size1), tree.root())


ANY_HASHLIKE = st.one_of(
    st.binary(min_size=32, max_size=32), st.binary(max_size=40), st.sampled_from(LEAVES[:4])
)
ANY_COUNT = st.one_of(st.integers(-2, 70), st.integers(0, 2**70), st.sampled_from([1 << 64]))


@FAST
@given(ANY_HASHLIKE, ANY_COUNT, ANY_COUNT, st.lists(ANY_HASHLIKE, max_size=12), ANY_HASHLIKE)
def test_arbitrary_inclusion_input_raises_only_proof_errors(
    leaf: bytes, index: int, size: int, proof: list[bytes], claimed_root: bytes
) -> None:
    if (index, size, proof, len(leaf)) == (0, 1, [], 32) and leaf == claimed_root:
        verify_inclusion(leaf, index, size, proof, claimed_root)  # a one-leaf tree: true claim
        return
    with pytest.raises(ProofError):
        verify_inclusion(leaf, index, size, proof, claimed_root)


@FAST
@given(ANY_COUNT, ANY_COUNT, st.lists(ANY_HASHLIKE, max_size=12), ANY_HASHLIKE, ANY_HASHLIKE)
def test_arbitrary_consistency_input_raises_only_proof_errors(
    size1: int, size2: int, proof: list[bytes], root1: bytes, root2: bytes
) -> None:
    if size1 == size2 and not proof and root1 == root2 and size1 > 0 and len(root1) == 32:
        verify_consistency(size1, size2, proof, root1, root2)  # the one claim that holds
        return
    with pytest.raises(ProofError):
        verify_consistency(size1, size2, proof, root1, root2)


# --- Stateful: a growing tree against a list of leaves ------------------------------------------


class GrowingTree(RuleBasedStateMachine):
    """Appends and bulk extends in any order; past roots and proofs stay valid."""

    def __init__(self) -> None:
        super().__init__()
        self.tree = MerkleTree()
        self.leaves: list[bytes] = []
        self.checkpoints: list[tuple[int, bytes]] = []

    @rule(count=st.integers(1, 3))
    def append(self, count: int) -> None:
        for _ in range(count):
            value = leaf_hash(len(self.leaves).to_bytes(4, "big"))
            assert self.tree.append(value) == len(self.leaves)
            self.leaves.append(value)

    @rule(count=st.integers(0, 70))
    def extend(self, count: int) -> None:
        batch = [
            leaf_hash(i.to_bytes(4, "big"))
            for i in range(len(self.leaves), len(self.leaves) + count)
        ]
        self.tree.extend(batch)
        self.leaves.extend(batch)

    @precondition(lambda self: self.leaves)
    @rule()
    def checkpoint(self) -> None:
        self.checkpoints.append((self.tree.size, self.tree.root()))

    @precondition(lambda self: self.leaves)
    @rule(data=st.data())
    def prove_inclusion_at_a_checkpoint(self, data: st.DataObject) -> None:
        size, size_root = (
            data.draw(st.sampled_from(self.checkpoints))
            if self.checkpoints
            else (
                self.tree.size,
                self.tree.root(),
            )
        )
        index = data.draw(st.integers(0, size - 1))
        proof = self.tree.inclusion_proof(index, size)
        verify_inclusion(self.leaves[index], index, size, proof, size_root)

    @invariant()
    def every_checkpoint_is_consistent_with_the_current_tree(self) -> None:
        assert self.tree.size == len(self.leaves)
        for size, checkpoint_root in self.checkpoints:
            assert self.tree.root(size) == checkpoint_root
            proof = self.tree.consistency_proof(size)
            verify_consistency(size, self.tree.size, proof, checkpoint_root, self.tree.root())

    @invariant()
    def the_root_is_the_root_of_the_leaves(self) -> None:
        assert self.tree.root() == MerkleTree.from_leaf_hashes(self.leaves).root()


TestGrowingTree = GrowingTree.TestCase
TestGrowingTree.settings = settings(
    max_examples=40, stateful_step_count=15, derandomize=True, database=None, deadline=None
)


def test_root_of_a_list_matches_the_incremental_tree() -> None:
    assert root(LEAVES) == TREE.root()
    assert root(LEAVES[:77]) == TREE.root(77)
