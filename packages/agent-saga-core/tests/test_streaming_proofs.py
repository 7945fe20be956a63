"""prove in bounded memory: inclusion paths collected in one streaming pass, no leaf kept.

The paths must be the ones the whole tree gives (every leaf and size up to a few hundred), a
bundle proven by the streaming pass must verify offline, and what the pass keeps must not grow
with the log: the same count of hashes for a saga in a log of 600 and of 4,800 records.
"""

from __future__ import annotations

import json
from pathlib import Path

from agent_saga import Entry, FileLogStore
from agent_saga._log.chain import Chain
from agent_saga._log.source import FileLogSource
from agent_saga.proofs import MerkleTree, leaf_hash
from agent_saga.proofs._audit import prove, snapshot
from agent_saga.proofs._disclosure import verify_bundle
from agent_saga.proofs._prover import CollectingFrontier, SagaProver, path_ranges
from agent_saga.proofs._signing import home_signer


def test_path_ranges_give_the_trees_inclusion_proofs() -> None:
    leaves = [leaf_hash(b"%d" % i) for i in range(70)]
    for size in range(1, 70):
        tree = MerkleTree()
        for leaf in leaves[:size]:
            tree.append(leaf)
        for index in range(size):
            expected = tree.inclusion_proof(index, size)
            got = []
            for a, b in path_ranges(index, 0, size):
                sub = MerkleTree()
                for leaf in leaves[a:b]:
                    sub.append(leaf)
                got.append(sub.root())
            assert got == expected, (index, size)


def test_the_collecting_frontier_keeps_the_subtrees_asked_for() -> None:
    leaves = [leaf_hash(b"%d" % i) for i in range(300)]
    tree = MerkleTree()
    frontier = CollectingFrontier()
    frontier.wanted = {(64, 6), (256, 5), (17, 0)}
    for leaf in leaves:
        tree.append(leaf)
        frontier.append_with_edge(leaf)
    assert frontier.root() == tree.root()
    for start, height in frontier.wanted:
        sub = MerkleTree()
        for leaf in leaves[start : start + (1 << height)]:
            sub.append(leaf)
        assert frontier.found[(start, height)] == sub.root()


def fill(home: Path, sagas: int) -> str:
    """``sagas`` sagas of 12 records in segments of 500; returns the id of the middle one."""
    with FileLogStore(home, segment_records=500) as store:
        for n in range(sagas):
            sid = f"saga-{n:05d}"
            entries = [Entry("saga.begin", sid, {"name": f"job {n}", "owner": "o"}, n)]
            entries += [
                Entry("step.intent", sid, {"ordinal": i, "tool": "t"}, n) for i in range(10)
            ]
            entries.append(Entry("saga.end", sid, {"records": 11, "status": "committed"}, n))
            store.append(entries, sync=n % 50 == 0)
    return f"saga-{sagas // 2:05d}"


def test_a_streamed_bundle_verifies_and_keeps_the_same_count_of_hashes(tmp_path: Path) -> None:
    kept = []
    for sagas in (50, 400):
        home = tmp_path / str(sagas)
        target = fill(home, sagas)
        bundle = prove(home, target)
        report = verify_bundle(json.dumps(bundle).encode(), [home_signer(home).verifier])
        assert report.saga == target
        assert len(report.records) == 12
        prover = SagaProver(target, Chain())
        log = snapshot(
            FileLogSource(home), keep_records=False, frontier=prover.frontier,
            observer=prover.observe,
        )  # fmt: skip
        assert log.chain.ok
        assert [r.saga for r in prover.records] == [target] * 12
        kept.append(len(prover.frontier.found) + len(prover.frontier.wanted))
    # 12 records, each asking for at most 62 right siblings and keeping its left ones
    assert kept[1] <= kept[0] + 12 * 8, kept  # log2(4,800 / 600) = 3 more levels
