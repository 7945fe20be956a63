"""verify with a second process: sealed segments checked there give the same report as here.

Every other sealed segment is handed to a worker process (:mod:`agent_saga.proofs._farm`); the
answer must be the one a pass in this process gives: the same root, the same count, and for a
tampered segment the same defect named at the same segment and offset (the worker declines and
the segment is read here).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_saga import Entry, FileLogStore
from agent_saga._log.chain import Chain
from agent_saga._log.source import FileLogSource
from agent_saga._log.stream import stream_verify
from agent_saga.proofs import MerkleTree
from agent_saga.proofs._farm import SegmentFarm, tiling
from agent_saga.proofs._frontier import MerkleFrontier
from agent_saga.proofs._merkle import leaf_hash
from agent_saga.proofs._stream import stream_log


def fill(home: Path, count: int) -> None:
    with FileLogStore(home, segment_records=40) as store:
        for n in range(count):
            entry = Entry("t", None, {"n": n, "pad": "x" * (n % 13)}, n)
            store.append([entry], sync=n % 9 == 0)


def segment(home: Path, first: int) -> Path:
    return home / "segments" / f"{first:020d}.jsonl"


def test_tiling_covers_a_range_with_aligned_subtrees() -> None:
    for start in range(40):
        for end in range(start, 80):
            blocks = tiling(start, end)
            at = start
            for first, height in blocks:
                assert first == at
                assert first % (1 << height) == 0
                at += 1 << height
            assert at == end


def test_subtrees_appended_whole_give_the_trees_root() -> None:
    leaves = [leaf_hash(b"%d" % i) for i in range(77)]
    tree = MerkleTree()
    for leaf in leaves:
        tree.append(leaf)
    frontier = MerkleFrontier()
    for first, height in tiling(0, 20) + tiling(20, 77):
        sub = MerkleTree()
        for leaf in leaves[first : first + (1 << height)]:
            sub.append(leaf)
        frontier.append_subtree(sub.root(), height)
    assert frontier.size == 77
    assert frontier.root() == tree.root()


def test_a_clean_log_verified_with_a_worker_has_the_same_root(tmp_path: Path) -> None:
    home = tmp_path / "home"
    fill(home, 330)
    alone = stream_log(FileLogSource(home))
    farmed = stream_log(FileLogSource(home), farm_bytes=0)
    assert alone.chain.ok
    assert farmed.chain.ok
    assert farmed.chain.records == alone.chain.records == 330
    assert farmed.frontier.root() == alone.frontier.root()
    taken: list[int] = []
    frontier = MerkleFrontier()

    class Counting(SegmentFarm):
        def take(self, path: str):  # type: ignore[no-untyped-def]
            found = super().take(path)
            taken.append(0 if found is None else found.records)
            return found

    def on_record(line: bytes, digest: bytes, end: int) -> None:
        frontier.append_chain_hash(digest)

    with Counting(lambda: frontier, None, min_bytes=0) as farm:
        report = stream_verify(home / "log.jsonl", Chain(), on_record, farm=farm)
    assert report.ok
    assert report.records == 330
    assert len(taken) >= 3, taken
    assert all(n == 40 for n in taken), taken
    assert frontier.root() == alone.frontier.root()


def _edit(path: Path) -> None:
    raw = path.read_bytes()
    path.write_bytes(raw.replace(b'"n":45,', b'"n":46,', 1))


def _drop(path: Path) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:5] + lines[6:]))


def _swap(path: Path) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    lines[3], lines[4] = lines[4], lines[3]
    path.write_bytes(b"".join(lines))


@pytest.mark.parametrize("tamper", [_edit, _drop, _swap])
def test_a_tampered_farmed_segment_is_named_as_without_a_worker(tmp_path: Path, tamper) -> None:  # type: ignore[no-untyped-def]
    home = tmp_path / "home"
    fill(home, 170)
    tamper(segment(home, 41))  # the second segment: the one a worker is handed first
    alone = stream_log(FileLogSource(home))
    farmed = stream_log(FileLogSource(home), farm_bytes=0)
    assert not alone.chain.ok
    assert str(segment(home, 41)) in str(alone.chain.error)
    assert str(farmed.chain.error) == str(alone.chain.error)
    assert farmed.chain.records == alone.chain.records
