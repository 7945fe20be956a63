"""verify and checkpoints in bounded memory: the Merkle frontier, resume points, ``--since``.

The frontier must give the roots the whole tree gives; a full verify keeps no record; a
resumed verify (``--since``) reads only what follows the newest verified checkpoint, checks the
stored point against the signed root before trusting it, and falls back to a full read when
the point does not hold; the background checkpointer starts from a stored point too.
"""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest
from agent_saga import Entry, FileLogStore
from agent_saga.cli import main
from agent_saga.proofs import MerkleTree, leaf_hash
from agent_saga.proofs._audit import snapshot
from agent_saga.proofs._frontier import MerkleFrontier, fold_edge, fold_frontier
from agent_saga.proofs._resume import VERIFIED_DIR
from click.testing import CliRunner, Result


def cli(home: Path, *args: str) -> Result:
    return CliRunner().invoke(main, ["--home", str(home), *args])


def fill(home: Path, start: int, count: int, *, segment_records: int = 40) -> None:
    with FileLogStore(home, segment_records=segment_records) as store:
        for n in range(start, start + count):
            store.append([Entry("t", None, {"n": n, "pad": "x" * (n % 13)}, n)], sync=n % 7 == 0)


def points(home: Path) -> list[Path]:
    return sorted((home / "checkpoints" / VERIFIED_DIR).glob("*.json"))


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A log of 300 records in segments of 40, a checkpoint of all of it, verified once."""
    home = tmp_path / "home"
    fill(home, 0, 300)
    assert cli(home, "checkpoint").exit_code == 0
    verified = cli(home, "verify")
    assert verified.exit_code == 0, verified.output
    return home


def test_the_frontier_gives_the_trees_root_and_binds_the_last_leaf_at_every_size() -> None:
    tree, frontier = MerkleTree(), MerkleFrontier()
    for i in range(300):
        leaf = leaf_hash(b"%d" % i)
        tree.append(leaf)
        edge = frontier.append_with_edge(leaf)
        assert frontier.root() == tree.root() == fold_frontier(frontier.hashes)
        assert len(frontier.hashes) == frontier.size.bit_count()
        assert fold_edge(leaf, edge) == frontier.hashes[-1]
    assert MerkleFrontier().root() == MerkleTree().root()


def test_a_full_verify_keeps_no_record_in_memory(tmp_path: Path) -> None:
    """Peak memory while verifying 1,500 and 9,000 records is the same: one chunk of a
    segment's bytes and a frontier (the segments are of the same size)."""
    peaks = []
    for count in (1500, 9000):
        home = tmp_path / str(count)
        fill(home, 0, count, segment_records=500)
        tracemalloc.start()
        log = snapshot(home, keep_records=False, home=home)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert log.chain.ok
        assert log.size == count
        assert log.records == ()
        assert log.tree is None
    assert peaks[1] < peaks[0] * 1.2, peaks


def test_verify_stores_a_resume_point_confirmed_by_the_checkpoint(home: Path) -> None:
    [point] = points(home)
    assert point.name == f"{300:020d}.json"
    stored = json.loads(point.read_text())
    assert stored["size"] == 300
    assert len(stored["frontier"]) == (300).bit_count()


def test_since_reads_only_the_segments_after_the_verified_checkpoint(home: Path) -> None:
    fill(home, 300, 50)
    # An old sealed segment is replaced by bytes of the same length: a resumed pass does not
    # read it (it was verified before), a full verify does and names it.
    old = home / "segments" / f"{41:020d}.jsonl"
    raw = old.read_bytes()
    old.write_bytes(raw.replace(b'"n":45,', b'"n":46,'))
    assert old.read_bytes() != raw
    resumed = cli(home, "verify", "--since", "latest")
    assert resumed.exit_code == 0, resumed.output
    assert "resumed after record 300" in resumed.output
    assert "read the 50 records after it" in resumed.output
    assert "log intact: 350 records" in resumed.output
    full = cli(home, "verify")
    assert full.exit_code == 1
    assert f"segments/{41:020d}.jsonl at byte offset" in full.output


def test_since_catches_a_record_altered_after_the_resume_point(home: Path) -> None:
    fill(home, 300, 50)
    newest = sorted((home / "segments").glob("*.jsonl"))[-1]
    raw = newest.read_bytes()
    newest.write_bytes(raw.replace(b'"n":345,', b'"n":346,'))
    result = cli(home, "verify", "--since", "latest")
    assert result.exit_code == 1
    assert "resumed after record 300" in result.output
    assert f"in {newest} at byte offset" in result.output.replace("\n", "")
    assert "hash does not match" in result.output


def test_a_resumed_verify_moves_the_point_forward(home: Path) -> None:
    fill(home, 300, 50)
    assert cli(home, "checkpoint").exit_code == 0
    first = cli(home, "verify", "--since", "latest")
    assert first.exit_code == 0, first.output
    assert [p.name for p in points(home)] == [f"{n:020d}.json" for n in (300, 350)]
    again = cli(home, "verify", "--since", "latest")
    assert "read the 0 records after it" in again.output


def test_a_forged_resume_point_is_not_used(home: Path) -> None:
    [point] = points(home)
    stored = json.loads(point.read_text())
    stored["frontier"][0] = "00" * 32
    point.write_text(json.dumps(stored))
    result = cli(home, "verify", "--since", "latest")
    assert result.exit_code == 0, result.output
    assert "not used: its frontier does not lead to the checkpoint's root" in result.output
    assert "resumed" not in result.output


def test_a_point_the_log_no_longer_continues_means_a_full_read(home: Path) -> None:
    [point] = points(home)
    stored = json.loads(point.read_text())
    stored["offset"] -= 5  # the hash and frontier hold; the position does not
    point.write_text(json.dumps(stored))
    result = cli(home, "verify", "--since", "latest")
    assert result.exit_code == 0, result.output
    assert "no longer continues the resume point at record 300" in result.output
    assert "log intact: 300 records" in result.output


def test_since_a_checkpoint_the_rewritten_log_does_not_extend_fails(
    home: Path, tmp_path: Path
) -> None:
    saved = tmp_path / "saved.note"
    saved.write_text((home / "checkpoints" / "latest.note").read_text())
    fill(home, 300, 20)
    (home / "checkpoints" / "latest.note").unlink()
    for point in points(home):
        point.unlink()
    for path in (home / "segments").iterdir():  # records 281 on are gone, as is their trace
        if path.name[:20].isdigit() and int(path.name[:20]) >= 281:
            path.unlink()
    result = cli(home, "verify", "--since", str(saved))
    assert result.exit_code == 1
    assert "INCONSISTENT" in result.output
    assert "log truncated: 280 records, but a checkpoint covers 300" in result.output


def test_the_checkpointer_starts_from_the_stored_point(home: Path) -> None:
    from agent_saga import REVERSIBLE, AgentKit

    with AgentKit(home=home, checkpoint_every=1, checkpoint_interval=3600) as kit:

        @kit.tool(name="t.add", semantics=REVERSIBLE)
        def add(x: int) -> int:
            return x + 1

        with kit.transaction("one"):
            add(1)
        published = kit.checkpoint()
        assert kit.checkpointer is not None
        assert kit.checkpointer._resumed_at == 300
    assert published.size > 300
    result = cli(home, "verify")  # the root it signed is the one of the whole log
    assert result.exit_code == 0, result.output
    assert f"consistent with the latest checkpoint ({published.size} records)" in result.output
