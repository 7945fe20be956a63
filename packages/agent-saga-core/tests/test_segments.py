"""The file log in segments: rolling, opening from summaries, migration, crashes across a roll.

A store rolls its open segment after ``segment_records`` records (or ``segment_bytes``); the
chain continues across segments, opening reads the sealed segments' summaries only, and every
reader (records, verify, follow) walks all segments. Crash safety across a roll is checked on
the simulated file system (a process crash and a power cut at every operation of a roll), with
real processes writing concurrently, and with real processes killed by SIGKILL.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agent_saga import CorruptLogError, Entry, FileLogStore, read_log, verify_file
from agent_saga._log.files import OS
from agent_saga._log.follow import LogFollower
from agent_saga._log.segments import SEGMENTS_DIR, read_layout, summary_path
from agent_saga.testing import SimFileSystem
from agent_saga.testing._simfs import SimCrash

VECTORS = Path(__file__).parent / "vectors" / "home-before-segments"
HOME = "/home"


def entry(n: int) -> Entry:
    return Entry("t", None, {"n": n, "pad": "x" * (n % 31)}, n)


def fill(store: FileLogStore, count: int, start: int = 0) -> None:
    for n in range(start, start + count):
        store.append([entry(n)], sync=n % 3 == 0)


def numbers(home: Path) -> list[int]:
    return [int(str(r.data["n"])) for r in read_log(home) if r.kind == "t"]


def segment_files(home: Path) -> list[str]:
    return sorted(p.name for p in (home / SEGMENTS_DIR).glob("*.jsonl"))


def test_the_store_rolls_by_record_count_and_the_chain_continues(tmp_path: Path) -> None:
    with FileLogStore(tmp_path, segment_records=10) as store:
        fill(store, 35)
        assert store.segment_path.endswith(f"{31:020d}.jsonl")
    assert segment_files(tmp_path) == [f"{n:020d}.jsonl" for n in (11, 21, 31)]
    summary = json.loads(Path(summary_path(tmp_path, 11)).read_text())
    assert (summary["first"], summary["last"]) == (11, 20)
    records = list(read_log(tmp_path))
    assert [r.seq for r in records] == list(range(1, 36))
    assert all(b.prev == a.hash for a, b in itertools.pairwise(records))
    report = verify_file(tmp_path / "log.jsonl")
    assert report.ok
    assert report.records == 35
    assert report.last_hash == records[-1].hash
    with FileLogStore(tmp_path, segment_records=10) as store:  # reopens in the open segment
        fill(store, 6, start=35)
    assert numbers(tmp_path) == list(range(41))
    assert segment_files(tmp_path)[-1] == f"{41:020d}.jsonl"


def test_the_store_rolls_by_size(tmp_path: Path) -> None:
    with FileLogStore(tmp_path, segment_bytes=2_000) as store:
        fill(store, 40)
    sizes = [(tmp_path / "log.jsonl").stat().st_size] + [
        (tmp_path / SEGMENTS_DIR / name).stat().st_size for name in segment_files(tmp_path)[:-1]
    ]
    assert len(sizes) >= 3
    assert all(2_000 <= size < 2_300 for size in sizes)
    assert numbers(tmp_path) == list(range(40))


def second_segment(home: Path) -> tuple[Path, bytes]:
    """A log of 25 records in segments of 10; the second segment's path and bytes."""
    with FileLogStore(home, segment_records=10) as store:
        fill(store, 25)
    sealed = home / SEGMENTS_DIR / f"{11:020d}.jsonl"
    return sealed, sealed.read_bytes()


def test_opening_reads_no_sealed_record_and_verify_names_an_edited_segment(
    tmp_path: Path,
) -> None:
    sealed, raw = second_segment(tmp_path)
    offset = raw.index(b'"n":15')
    sealed.write_bytes(raw[:offset] + b'"n":16' + raw[offset + 6 :])  # same length
    with FileLogStore(tmp_path, segment_records=10) as store:  # summaries only: opens
        store.append([entry(99)], sync=True)
        report = store.verify()
    assert not report.ok
    assert report.error is not None
    assert report.error.path == str(sealed)
    line_start = raw.rfind(b"\n", 0, offset) + 1
    assert report.error.offset == line_start
    assert report.error.seq == 16
    with pytest.raises(CorruptLogError, match=f"{11:020d}.jsonl"):
        list(read_log(tmp_path))


def test_a_sealed_segment_cut_short_fails_opening_with_its_name(
    tmp_path: Path,
) -> None:
    sealed, raw = second_segment(tmp_path)
    sealed.write_bytes(raw[: raw.rindex(b"\n", 0, len(raw) - 1) + 1])  # last record cut
    with pytest.raises(CorruptLogError, match=f"{11:020d}.jsonl.*sealed at"):
        FileLogStore(tmp_path, segment_records=10)
    assert not verify_file(tmp_path / "log.jsonl").ok


def test_a_deleted_sealed_segment_fails_opening_and_reading(tmp_path: Path) -> None:
    with FileLogStore(tmp_path, segment_records=10) as store:
        fill(store, 35)
    (tmp_path / SEGMENTS_DIR / f"{11:020d}.jsonl").unlink()
    with pytest.raises(CorruptLogError, match="sealed segment is missing"):
        FileLogStore(tmp_path, segment_records=10)
    with pytest.raises(CorruptLogError, match="sealed segment is missing"):
        list(read_log(tmp_path))


def test_a_missing_or_damaged_summary_is_rebuilt_from_the_records(tmp_path: Path) -> None:
    with FileLogStore(tmp_path, segment_records=10) as store:
        fill(store, 35)
    first = Path(summary_path(tmp_path, 11))
    second = Path(summary_path(tmp_path, 21))
    expected = first.read_bytes(), second.read_bytes()
    first.unlink()
    second.write_bytes(b'{"v":1,"first":21')
    with FileLogStore(tmp_path, segment_records=10) as store:
        store.append([entry(35)], sync=True)
    assert (first.read_bytes(), second.read_bytes()) == expected
    assert numbers(tmp_path) == list(range(36))


def test_a_lying_summary_is_not_trusted_over_the_records(tmp_path: Path) -> None:
    with FileLogStore(tmp_path, segment_records=10) as store:
        fill(store, 25)
    path = Path(summary_path(tmp_path, 11))
    summary = json.loads(path.read_text())
    summary["hash"] = "0" * 64
    path.write_text(json.dumps(summary))
    with pytest.raises(CorruptLogError, match=f"{21:020d}.jsonl.*prev does not match"):
        FileLogStore(tmp_path, segment_records=10)
    report = verify_file(tmp_path / "log.jsonl")
    assert not report.ok
    assert report.error is not None
    assert "summary" in report.error.reason


def test_a_follower_crosses_segments(tmp_path: Path) -> None:
    with FileLogStore(tmp_path, segment_records=4) as store:
        follower = LogFollower(store)
        fill(store, 6)
        assert [r.data["n"] for r in follower.new_records()] == list(range(6))
        fill(store, 9, start=6)
        assert [r.data["n"] for r in follower.new_records()] == list(range(6, 15))
        assert list(follower.new_records()) == []


def test_a_home_written_before_segments_opens_and_migrates_without_loss(tmp_path: Path) -> None:
    home = tmp_path / "home"
    shutil.copytree(VECTORS, home)
    before = list(read_log(home))
    assert len(before) == 42
    with FileLogStore(home) as store:  # default limits: it stays one open segment
        store.append([entry(0)], sync=True)
    assert segment_files(home) == []
    with FileLogStore(home, segment_records=10) as store:  # over the limit: sealed on open
        assert store.segment_path.endswith(f"{44:020d}.jsonl")
        store.append([entry(1)], sync=True)
    after = list(read_log(home))
    assert [r.hash for r in after[:42]] == [r.hash for r in before]
    assert [r.seq for r in after] == list(range(1, 45))
    layout = read_layout(OS, home)
    assert [s.first for s in layout.segments] == [1, 44]
    assert verify_file(home / "log.jsonl").ok


def _process_crash_at(operation: int, rng_seed: int) -> str | None:
    """Crash (process death: written bytes stay) at ``operation``, reopen, check the log."""
    fs = SimFileSystem(rng_seed, crash_after=None)
    store = FileLogStore(HOME, fs=fs, preallocate=512, segment_records=4)
    fill(store, 3)
    acked = list(range(3))
    fs.crash_after = fs.operations + operation
    try:
        for n in range(3, 9):
            store.append([entry(n)], sync=True)
            acked.append(n)
    except SimCrash:
        pass
    fs.process_crash()
    try:
        reopened = FileLogStore(HOME, fs=fs, preallocate=512, segment_records=4)
        got = [int(str(r.data["n"])) for r in reopened.records() if r.kind == "t"]
        reopened.append([entry(100)], sync=True)
        seqs = [r.seq for r in reopened.records()]
    except CorruptLogError as exc:
        return f"crash at operation {operation}: reopening failed: {exc}"
    if got[: len(acked)] != acked:
        return f"crash at operation {operation}: acknowledged {acked}, found {got}"
    if seqs != list(range(1, len(seqs) + 1)):
        return f"crash at operation {operation}: chain not continuous: {seqs}"
    return None


def test_a_process_crash_at_every_operation_across_rolls_loses_nothing() -> None:
    failures = [f for op in range(60) if (f := _process_crash_at(op, op)) is not None]
    assert failures == [], failures[:3]


def _power_cut_trial(seed: int) -> str | None:
    fs = SimFileSystem(seed)
    acked: list[int] = []
    counter = 0
    for epoch in range(4):
        try:
            store = FileLogStore(HOME, fs=fs, preallocate=512, segment_records=3)
            got = [int(str(r.data["n"])) for r in store.records() if r.kind == "t"]
        except CorruptLogError as exc:
            return f"seed {seed} epoch {epoch}: reopening failed: {exc}"
        if [n for n in got if n in acked] != acked:
            return f"seed {seed} epoch {epoch}: acknowledged {acked}, found {got}"
        fs.crash_after = fs.operations + (seed * 7 + epoch * 3) % 40
        try:
            for _ in range(8):
                store.append([entry(counter)], sync=True)
                acked.append(counter)
                counter += 1
        except SimCrash:
            counter += 1
        fs.power_loss()
    return None


def test_power_cuts_at_every_point_of_a_roll_lose_nothing_acknowledged() -> None:
    failures = [f for seed in range(400) if (f := _power_cut_trial(seed)) is not None]
    assert failures == [], failures[:3]


WRITER = """
import sys
from agent_saga import Entry, FileLogStore
home, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
with FileLogStore(home, segment_records=7, preallocate=512) as store:
    for n in range(count):
        store.append([Entry("t", None, {"w": name, "n": n}, n)], sync=n % 2 == 0)
        print(n, flush=True)
"""


def test_writers_in_several_processes_roll_segments_without_breaking_the_chain(
    tmp_path: Path,
) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_path), f"w{i}", "60"],
            stdout=subprocess.DEVNULL,
        )
        for i in range(3)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    records = list(read_log(tmp_path))
    for name in ("w0", "w1", "w2"):
        assert [r.data["n"] for r in records if r.data.get("w") == name] == list(range(60))
    assert [r.seq for r in records] == list(range(1, 181))
    assert len(segment_files(tmp_path)) >= 180 // 14  # others may append before a roll
    assert verify_file(tmp_path / "log.jsonl").ok


def test_sigkill_during_rolls_loses_no_acknowledged_record(tmp_path: Path) -> None:
    acked: list[int] = []
    for round_ in range(12):
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_path), f"r{round_}", "400"],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        lines = [proc.stdout.readline()]  # the first record is written: the store is open
        time.sleep((round_ % 6) * 0.01)
        os.kill(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=60)
        acked.extend(int(line) + 1000 * round_ for line in [*lines, *out.split()] if line.strip())
        with FileLogStore(tmp_path, segment_records=7, preallocate=512) as store:
            found = {
                int(str(r.data["n"])) + 1000 * int(str(r.data["w"])[1:]) for r in store.records()
            }
        missing = [n for n in acked if n not in found]  # a process crash keeps written records
        assert missing == [], f"round {round_}: acknowledged records lost: {missing}"
    assert verify_file(tmp_path / "log.jsonl").ok
    assert len(segment_files(tmp_path)) > 3


def test_the_commands_read_a_segmented_home_and_name_an_edited_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent_saga import REVERSIBLE, AgentKit
    from agent_saga.cli import main
    from click.testing import CliRunner

    (tmp_path / "agent-saga.toml").write_text("segment_records = 7\n")
    monkeypatch.chdir(tmp_path)
    home = tmp_path / "home"
    kit = AgentKit(home=home)

    @kit.tool(semantics=REVERSIBLE)
    def add(x: int) -> int:
        return x + 1

    ids = []
    for n in range(5):
        with kit.transaction(f"saga-{n}") as saga:
            add(n)
            add(n + 1)
            ids.append(saga.id)
    kit.close()
    assert len(segment_files(home)) >= 2  # a saga's buffered records land in one batch

    def run(*args: str) -> tuple[int, str]:
        result = CliRunner().invoke(main, ["--home", str(home), *args])
        return result.exit_code, result.stdout

    code, listing = run("sagas")
    assert code == 0
    assert all(saga_id in listing for saga_id in ids)
    code, replay = run("replay", ids[0])
    assert code == 0
    assert "add" in replay
    code, verified = run("verify")
    assert code == 0, verified
    sealed = tmp_path / "home" / SEGMENTS_DIR / segment_files(home)[0]
    raw = sealed.read_bytes()
    sealed.write_bytes(raw.replace(b'"x":', b'"y":', 1))
    code, broken = run("verify")
    assert code == 1
    assert sealed.name in broken
    assert "offset" in broken
