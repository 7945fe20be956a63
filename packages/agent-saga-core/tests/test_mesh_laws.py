"""Merging offline devices' logs is a grow-only set: it commutes, associates, is idempotent, and
every sync order over any partition of the devices converges to the same bytes, in which every
origin's chain and checkpoints verify with the core's own reader.

The inputs are real device homes: three devices, each copied at three moments (so inputs are
prefixes of one another), and a fourth home made from a copy of the first device's home that
went on differently under the same key (an equivocating origin, whose two histories must both
be kept, never one chosen by arrival order).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from agent_saga import REVERSIBLE, AgentKit, FakeClock, SequentialIds
from agent_saga._log.source import FileLogSource
from agent_saga.proofs._audit import latest_problem, snapshot
from agent_saga.proofs._mesh.layout import plan_origin
from agent_saga.proofs._mesh.merge import maximal_branches, merge_logs
from agent_saga.proofs._mesh.origin import Branch, check_branch, read_origin
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

PURE = settings(max_examples=300, derandomize=True, database=None, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
LAWS = settings(
    max_examples=6,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],  # the autouse home, unused here
)
HOME_FILES = ("log.jsonl", "keys/checkpoint.pub", "checkpoints/latest.note")


def _run_sagas(kit: AgentKit, clock: FakeClock, count: int, tag: str) -> None:
    @kit.tool(name=f"lookup.{tag}", semantics=REVERSIBLE)
    def lookup(n: int) -> int:
        return n * 2

    for index in range(count):
        clock.advance(1.5)
        with kit.transaction(f"{tag}-{index}"):
            lookup(index)
    kit.checkpoint()


def _copy_home(home: Path, target: Path) -> Path:
    """What a device hands over: its log, its public key and its latest checkpoint."""
    for name in HOME_FILES:
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(home / name, target / name)
    return target


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("devices")
    sources: list[Path] = []
    for offset, name in enumerate("abc"):
        home = root / f"home-{name}"
        clock = FakeClock(1_700_000_000.0 + offset * 0.7)
        with AgentKit(home=home, ids=SequentialIds(name), clock=clock) as kit:
            for moment in range(3):
                _run_sagas(kit, clock, 1 + offset, f"{name}{moment}")
                sources.append(_copy_home(home, root / f"{name}-{moment}"))
                if name == "a" and moment == 0:
                    shutil.copytree(home, root / "home-a-clone")
    clock = FakeClock(1_700_000_100.0)
    with AgentKit(home=root / "home-a-clone", ids=SequentialIds("x"), clock=clock) as kit:
        _run_sagas(kit, clock, 2, "clone")
    sources.append(_copy_home(root / "home-a-clone", root / "a-clone"))
    return sources


def _state(mesh: Path) -> dict[str, bytes]:
    files = [mesh / "mesh.json", *(p for p in (mesh / "origins").rglob("*") if p.is_file())]
    return {str(p.relative_to(mesh)): p.read_bytes() for p in files}


def _verified(mesh: Path) -> None:
    """Every origin of the mesh verifies as a home would: chain, then its latest checkpoint."""
    for origin in (mesh / "origins").iterdir():
        log = snapshot(FileLogSource(origin), home=origin)
        assert log.chain.ok, log.chain.error
        verifier = read_origin(origin).verifier
        checkpoint, problem = latest_problem(origin, log, [verifier])
        assert problem is None
        assert checkpoint is not None
        assert checkpoint.size == log.size


class Meshes:
    """Fresh mesh directories for one example, removed with it."""

    def __init__(self, pool: list[Path]) -> None:
        self.root = Path(tempfile.mkdtemp(dir=pool[0].parent))  # pytest's temporary area

    def merged(self, *sources: Path, one_by_one: bool = False) -> Path:
        target = Path(tempfile.mkdtemp(dir=self.root)) / "mesh"
        if one_by_one:
            for source in sources:
                assert merge_logs(target, [source]).ok
        else:
            assert merge_logs(target, list(sources)).ok
        _verified(target)
        return target

    def close(self) -> None:
        shutil.rmtree(self.root)


subsets = st.lists(st.integers(0, 9), min_size=1, max_size=3)


@pytest.fixture(scope="module")
def branches(pool: list[Path]) -> list[Branch]:
    found = []
    for source in pool:
        branch, refused = check_branch(source, str(source))
        assert branch is not None
        assert not refused
        found.append(branch)
    return found


def _join(*states: list[Branch]) -> list[Branch]:
    """The set's join, as the merge computes it before writing: per origin, the maximal
    branches of the union."""
    by_origin: dict[str, list[Branch]] = {}
    for state in states:
        for branch in state:
            by_origin.setdefault(branch.origin.id, []).append(branch)
    return [b for group in by_origin.values() for b in maximal_branches(group)]


def _files(state: list[Branch]) -> dict[str, dict[str, object]]:
    """What the merge would write for ``state``: per origin, each file's bytes (a log as its
    origin, size and last leaf)."""
    by_origin: dict[str, list[Branch]] = {}
    for branch in state:
        by_origin.setdefault(branch.origin.id, []).append(branch)
    out: dict[str, dict[str, object]] = {}
    for origin, group in by_origin.items():
        ordered = maximal_branches(group)
        checkpoints = [c for b in group for c in b.checkpoints]
        planned = plan_origin(ordered, checkpoints)
        out[origin] = {
            name: (c.origin.id, c.size, c.tip) if isinstance(c, Branch) else c
            for name, c in planned.items()
        }
    return out


sets = st.lists(st.integers(0, 9), max_size=6)


@PURE
@given(a=sets, b=sets, c=sets)
def test_the_join_is_a_semilattice(
    branches: list[Branch], a: list[int], b: list[int], c: list[int]
) -> None:
    """Commutative, associative, idempotent, and the merge writes the same files for equal
    sets: checked on the join itself over many sets (the disk-level laws below check that the
    merge writes it faithfully)."""
    x, y, z = ([branches[i] for i in part] for part in (a, b, c))
    assert _files(_join(x, y)) == _files(_join(y, x))
    assert _files(_join(_join(x, y), z)) == _files(_join(x, _join(y, z)))
    assert _files(_join(x, x)) == _files(_join(x)) == _files(_join(_join(x)))
    for branch in _join(x, y):  # monotone: everything of x is still held
        assert branch.origin.id in {o.origin.id for o in _join(x, y)}
    for branch in x:
        assert any(kept.extends(branch) for kept in _join(x, y))


@LAWS
@given(left=subsets, right=subsets)
def test_merge_commutes(pool: list[Path], left: list[int], right: list[int]) -> None:
    meshes = Meshes(pool)
    try:
        a = meshes.merged(*(pool[i] for i in left))
        b = meshes.merged(*(pool[i] for i in right))
        assert _state(meshes.merged(a, b, one_by_one=True)) == _state(
            meshes.merged(b, a, one_by_one=True)
        )
    finally:
        meshes.close()


@LAWS
@given(first=st.integers(0, 9), second=st.integers(0, 9), third=st.integers(0, 9))
def test_merge_associates(pool: list[Path], first: int, second: int, third: int) -> None:
    meshes = Meshes(pool)
    try:
        a, b, c = pool[first], pool[second], pool[third]
        left = meshes.merged(meshes.merged(a, b), c)
        right = meshes.merged(a, meshes.merged(b, c))
        assert _state(left) == _state(right)
    finally:
        meshes.close()


@LAWS
@given(chosen=subsets)
def test_merge_is_idempotent(pool: list[Path], chosen: list[int]) -> None:
    meshes = Meshes(pool)
    try:
        once = meshes.merged(*(pool[i] for i in chosen))
        state = _state(once)
        assert _state(meshes.merged(once, once)) == state
        again = merge_logs(once, [once, *(pool[i] for i in chosen)])
        assert again.added == 0
        assert again.ok
        assert _state(once) == state
    finally:
        meshes.close()


@LAWS
@given(
    chosen=st.lists(st.integers(0, 9), min_size=1, max_size=7),
    data=st.data(),
)
def test_every_partition_and_sync_order_converges(
    pool: list[Path], chosen: list[int], data: st.DataObject
) -> None:
    """Devices sync in groups (each group's mesh built one input at a time, in a drawn order),
    then the groups' meshes meet in a drawn order: the same bytes as one merge of everything."""
    meshes = Meshes(pool)
    try:
        groups: dict[int, list[Path]] = {}
        for index in chosen:
            groups.setdefault(data.draw(st.integers(0, 2)), []).append(pool[index])
        built = [
            meshes.merged(*data.draw(st.permutations(members)), one_by_one=True)
            for members in groups.values()
        ]
        final = meshes.merged(*data.draw(st.permutations(built)), one_by_one=True)
        assert _state(final) == _state(meshes.merged(*(pool[i] for i in chosen)))
    finally:
        meshes.close()


def test_a_merge_holds_every_record_signed_and_keeps_both_histories_of_a_clone(
    pool: list[Path],
) -> None:
    meshes = Meshes(pool)
    try:
        report = merge_logs(meshes.root / "all", pool)
        assert report.ok
        sizes = {o.name: (o.records, o.forks) for o in report.origins}
        assert len(sizes) == 3
        clone_origin = read_origin(pool[0]).name
        records, forks = sizes[clone_origin]
        assert len(forks) == 1
        assert {records, forks[0]} == {
            sum(1 for _ in FileLogSource(pool[2]).records()),
            sum(1 for _ in FileLogSource(pool[9]).records()),
        }
        _verified(meshes.root / "all")
        fork_dirs = list((meshes.root / "all" / "origins").glob("*/forks/*"))
        assert len(fork_dirs) == 1
    finally:
        meshes.close()
