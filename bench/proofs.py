"""What the RFC 9162 Merkle tree costs, against a hashing floor measured in the same run.

Prints:
  * the floor: SHA-256 of one 65-byte interior node, and of all ``n - 1`` interior nodes of an
    ``n``-leaf tree in one tight loop (the hashing no implementation can skip);
  * building the tree from ``n`` precomputed 32-byte leaf hashes in bulk (``from_leaf_hashes``)
    and one ``append`` at a time, with the ratio to the floor;
  * p50 times of an inclusion proof, its verification, a consistency proof, its verification,
    and the root of a past size, over many random indices and sizes;
  * proof sizes in bytes at a few tree sizes, and the bytes the tree holds.

Targets: build 1,000,000 leaves under 3 s; inclusion proof and its verification under 100 us
p50 each. Leaf hashing (``SHA-256(0x00 || record)``) is timed separately and not counted.

Usage: uv run python bench/proofs.py [--quick] [--leaves N] [--samples N] [--seed N]
"""

from __future__ import annotations

import argparse
import hashlib
import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import TypeVar

from agent_saga.proofs._merkle import leaf_hash, verify_consistency, verify_inclusion
from agent_saga.proofs._tree import MerkleTree

BUILD_TARGET_S = 3.0
PROOF_TARGET_US = 100.0
T = TypeVar("T")


def p50_us(func: Callable[[int], object], args: list[int]) -> float:
    clock = time.perf_counter_ns
    samples = []
    for arg in args:
        start = clock()
        func(arg)
        samples.append(clock() - start)
    return statistics.median(samples) / 1000.0


def seconds(func: Callable[[], T]) -> tuple[float, T]:
    start = time.perf_counter()
    result = func()
    return time.perf_counter() - start, result


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT MET"


def node_hash_floor_us(rounds: int = 20, batch: int = 2000) -> float:
    node = b"\x01" + bytes(64)
    sha = hashlib.sha256
    per_call = []
    for _ in range(rounds):
        start = time.perf_counter_ns()
        for _ in range(batch):
            sha(node).digest()
        per_call.append((time.perf_counter_ns() - start) / batch)
    return statistics.median(per_call) / 1000.0


def all_nodes_floor_s(leaf_hashes: list[bytes]) -> float:
    """Hash every interior node of a perfect-ish tree level by level, with no bookkeeping."""
    start = time.perf_counter()
    level = b"".join(leaf_hashes)
    sha = hashlib.sha256
    while len(level) > 32:
        pairs = len(level) // 64 * 64
        upper = b"".join([sha(b"\x01" + level[i : i + 64]).digest() for i in range(0, pairs, 64)])
        level = upper + level[pairs:]  # an unpaired hash moves up unchanged (RFC: no duplication)
    return time.perf_counter() - start


def build_figures(leaves: list[bytes]) -> tuple[MerkleTree, float]:
    """Time both ways of building the tree; return it and the one-node-hash floor (us)."""
    n = len(leaves)
    floor_node = node_hash_floor_us()
    floor_build = all_nodes_floor_s(leaves)
    print(f"floor: one node hash p50:        {floor_node * 1000:8.0f} ns")
    print(f"floor: all {n - 1:,} node hashes: {floor_build:8.3f} s")

    bulk_s, tree = seconds(lambda: MerkleTree.from_leaf_hashes(leaves))

    def append_all() -> MerkleTree:
        incremental = MerkleTree()
        for value in leaves:
            incremental.append(value)
        return incremental

    append_s, appended = seconds(append_all)
    if appended.root() != tree.root():
        raise SystemExit("appending one at a time gave another root than the bulk build")
    target = BUILD_TARGET_S * n / 1_000_000
    print(
        f"build, bulk:                     {bulk_s:8.3f} s  "
        f"({bulk_s / floor_build:.2f}x floor; target < {target:.2f} s: {verdict(bulk_s < target)})"
    )
    print(
        f"build, one append at a time:     {append_s:8.3f} s  "
        f"({append_s / floor_build:.2f}x floor; {append_s / n * 1e6:.2f} us per append; "
        f"target < {target:.2f} s: {verdict(append_s < target)})"
    )
    held = sum(sys.getsizeof(level) for level in tree._levels)  # the stored level arrays
    print(f"tree holds:                      {held / 2**20:8.1f} MiB ({held / n:.0f} B per leaf)")
    return tree, floor_node


def proof_figures(
    tree: MerkleTree, leaves: list[bytes], rng: random.Random, samples: int, floor_node: float
) -> None:
    n = tree.size
    root = tree.root()
    indices = [rng.randrange(n) for _ in range(samples)]
    proofs = {i: tree.inclusion_proof(i) for i in indices}
    prove_us = p50_us(tree.inclusion_proof, indices)
    verify_us = p50_us(lambda i: verify_inclusion(leaves[i], i, n, proofs[i], root), indices)
    for name, value in (("proof", prove_us), ("verify", verify_us)):
        print(
            f"inclusion {name + ' p50:':<22}{value:8.1f} us  "
            f"({value / floor_node:.0f}x one node hash; target < {PROOF_TARGET_US:.0f} us: "
            f"{verdict(value < PROOF_TARGET_US)})"
        )

    sizes1 = [rng.randrange(1, n) for _ in range(samples)]
    roots1 = {s: tree.root(s) for s in sizes1}
    consistency = {s: tree.consistency_proof(s) for s in sizes1}
    cons_us = p50_us(tree.consistency_proof, sizes1)
    cons_verify_us = p50_us(
        lambda s: verify_consistency(s, n, consistency[s], roots1[s], root), sizes1
    )
    past_root_us = p50_us(tree.root, sizes1)
    print(f"consistency proof p50:           {cons_us:8.1f} us  (size1 random, size2 = {n:,})")
    print(f"consistency verify p50:          {cons_verify_us:8.1f} us")
    print(f"root of a past size p50:         {past_root_us:8.1f} us")


def size_figures(tree: MerkleTree) -> None:
    print("proof sizes in bytes (inclusion: first / last leaf; consistency: from size/2 + 1):")
    for size in (1_000, 10_000, 100_000, 1_000_000):
        if size > tree.size:
            continue
        first = 32 * len(tree.inclusion_proof(0, size))
        last = 32 * len(tree.inclusion_proof(size - 1, size))
        cons = 32 * len(tree.consistency_proof(size // 2 + 1, size))
        print(f"  size {size:>9,}: inclusion {first:4d} / {last:4d}, consistency {cons:4d}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100,000 leaves, fewer samples")
    parser.add_argument("--leaves", type=int, default=None, help="tree size (default 1,000,000)")
    parser.add_argument("--samples", type=int, default=None, help="samples per p50 figure")
    parser.add_argument("--seed", type=int, default=9162)
    args = parser.parse_args(argv)
    n = args.leaves or (100_000 if args.quick else 1_000_000)
    samples = args.samples or (500 if args.quick else 3000)
    print(f"python {sys.version.split()[0]}, {n:,} leaves, {samples:,} samples per p50")

    leaf_s, leaves = seconds(lambda: [leaf_hash(i.to_bytes(8, "big")) for i in range(n)])
    print(f"leaf hashing (not counted):      {leaf_s:8.3f} s")
    tree, floor_node = build_figures(leaves)
    proof_figures(tree, leaves, random.Random(args.seed), samples, floor_node)
    size_figures(tree)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
