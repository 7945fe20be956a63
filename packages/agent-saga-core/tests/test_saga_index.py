"""The saga index: every answer read through it equals the answer of a full read of the log.

Random logs (sagas of every shape, interleaved, with saga-less and settling records, across
segment rolls) are answered through the index and by a full scan; then the index is deleted,
filled with garbage, made stale or pointed at the wrong bytes, and must still answer the same
(rebuilt from the log, never trusted over it). Writers in several processes keep it up to date
through the writer's hook, and a process killed while indexing leaves an index that is caught
up or rebuilt by the next reader.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agent_saga import CorruptLogError, Entry, FileLogStore, read_log
from agent_saga._history.build import build_history
from agent_saga._history.indexed import find_indexed, newest_views, unfinished_views, with_rebuild
from agent_saga._history.lookup import find_saga
from agent_saga._history.sagareads import own_records, unfinished_sagas
from agent_saga._history.views import SagaView
from agent_saga._log.chain import Chain
from agent_saga._log.codec import JSONValue
from agent_saga._log.records import SagaStatus
from agent_saga._log.sagaindex import INDEX_DIR, INDEX_NAME, IndexMismatch, SagaIndex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

END_STATUSES = ["committed", "rolled_back", "needs_human", "bogus"]


@st.composite
def saga_scripts(draw: st.DrawFn) -> list[Entry]:
    """Interleaved entries of a few sagas: begun or not, steps, suspended, ended (with any
    status, sometimes twice), settled, plus saga-less events."""
    count = draw(st.integers(1, 8))
    lines: list[list[Entry]] = []
    for n in range(count):
        sid = f"0000{n:02d}-{draw(st.sampled_from(['aa', 'ab', 'b']))}-{n}"
        own: list[Entry] = []
        if draw(st.booleans()) or n == 0:
            own.append(Entry("saga.begin", sid, {"name": f"s{n}", "owner": "gone-1"}, n * 10))
        for ordinal in range(1, draw(st.integers(0, 3)) + 1):
            step: dict[str, JSONValue] = {"ordinal": ordinal, "tool": "add", "semantics": "r"}
            own.append(Entry("step.intent", sid, dict(step), n * 10 + ordinal))
            if draw(st.booleans()):
                own.append(Entry("step.done", sid, {"ordinal": ordinal, "result": 1}, n * 10))
        if draw(st.integers(0, 4)) == 0:
            own.append(Entry("saga.suspended", sid, {"expires_at": 5}, n * 10 + 5))
        for _ in range(draw(st.integers(0, 2))):
            status = draw(st.sampled_from(END_STATUSES))
            own.append(Entry("saga.end", sid, {"status": status}, n * 10 + 6))
        if not own:
            own.append(Entry("step.intent", sid, {"ordinal": 1, "tool": "x"}, n))
        if draw(st.booleans()):
            own.append(Entry("saga.settled", None, {"saga": sid, "by": "ann", "note": "ok"}, 9))
        lines.append(own)
    entries: list[Entry] = []
    while any(lines):
        pick = draw(st.sampled_from([line for line in lines if line]))
        entries.append(pick.pop(0))
        if draw(st.integers(0, 5)) == 0:
            entries.append(Entry("control.halt", None, {"reason": "r"}, 1))
    return entries


def write_log(home: Path, entries: list[Entry], segment_records: int) -> None:
    with FileLogStore(home, segment_records=segment_records) as store:
        for entry in entries:
            store.append([entry], sync=False)


def full_history(home: Path) -> list[SagaView]:
    return list(build_history(read_log(home)).sagas)


def same_answers(home: Path, index: SagaIndex, since: int, status: SagaStatus | None) -> None:
    full = full_history(home)
    for view in full:
        assert find_indexed(index, view.id) == view
        assert (
            find_indexed(index, view.id[:7]) == find_saga(full, view.id[:7])
            if len([v for v in full if v.id.startswith(view.id[:7])]) == 1
            else True
        )
    for limit in (1, 2, 50):
        expected = [
            v
            for v in reversed(full)
            if (status is None or v.status is status) and v.started >= since
        ][:limit]
        assert newest_views(index, limit=limit, since=since, status=status) == expected
    assert unfinished_views(index) == [v for v in full if v.ended is None]


def spoil(home: Path, how: str) -> None:
    """Damage the index file the way ``how`` says."""
    path = home / INDEX_DIR / INDEX_NAME
    if how == "delete":
        path.unlink()
    elif how == "garbage":
        path.write_bytes(os.urandom(4096) * 3)
    elif how == "shifted":  # every position off by one byte: reads fail to verify
        with sqlite3.connect(path) as db:
            db.execute("UPDATE records SET off = off + 1")
    elif how == "stale":  # the index says it covers a record the log does not have
        with sqlite3.connect(path) as db:
            db.execute("UPDATE meta SET v = '1 0 5 999 " + "0" * 64 + " " + "1" * 64 + "'"
                       " WHERE k = 'point'")  # fmt: skip
    elif how == "lost-rows":  # rows lost, the sagas' counts kept
        with sqlite3.connect(path) as db:
            db.execute("DELETE FROM records WHERE seq % 2 = 0")


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    entries=saga_scripts(),
    segment_records=st.integers(2, 40),
    how=st.sampled_from(["delete", "garbage", "shifted", "stale", "lost-rows"]),
    since=st.sampled_from([0, 25, 1000]),
    status=st.sampled_from([None, *SagaStatus]),
)
def test_every_answer_through_the_index_equals_a_full_scan(
    tmp_path_factory: pytest.TempPathFactory,
    entries: list[Entry],
    segment_records: int,
    how: str,
    since: int,
    status: SagaStatus | None,
) -> None:
    home = tmp_path_factory.mktemp("home")
    write_log(home, entries, segment_records)
    index = SagaIndex(home, Chain())
    try:
        same_answers(home, index, since, status)
        index.close()
        spoil(home, how)
        same_answers(home, index, since, status)
        more = [Entry("saga.begin", "zz-late", {"name": "late"}, 99)]
        write_log(home, more, segment_records)  # the log grew: the index catches up
        same_answers(home, index, since, status)
    finally:
        index.close()


def test_a_record_changed_after_indexing_is_never_answered(tmp_path: Path) -> None:
    with FileLogStore(tmp_path) as store:
        store.append([Entry("saga.begin", "s-1", {"name": "first"}, 1)], sync=True)
        store.append([Entry("saga.end", "s-1", {"status": "committed"}, 2)], sync=True)
    index = SagaIndex(tmp_path, Chain())
    assert find_indexed(index, "s-1").status is SagaStatus.COMMITTED
    index.close()
    log = tmp_path / "log.jsonl"
    log.write_bytes(log.read_bytes().replace(b'"committed"', b'"rolled_back"'))
    # The index is rebuilt (its last record no longer verifies) and reads the changed record
    # back: refused, so callers read the log in full, which names the hash.
    with pytest.raises(IndexMismatch, match="not record 2"):
        with_rebuild(index, lambda: find_indexed(index, "s-1"))
    index.close()
    with pytest.raises(CorruptLogError, match="hash"):
        list(read_log(log))


def test_a_store_reads_one_saga_and_the_unfinished_ones_through_its_index(
    tmp_path: Path,
) -> None:
    with FileLogStore(tmp_path, segment_records=7) as store:
        for n in range(300):
            sid = f"s-{n:04d}"
            store.append([Entry("saga.begin", sid, {"name": "x", "owner": "o"}, n)], sync=False)
            if n != 150:
                store.append([Entry("saga.end", sid, {"status": "committed"}, n)], sync=False)
        assert store.saga_index is not None
        views = unfinished_sagas(store)
        assert [v.id for v in views] == ["s-0150"]
        assert [r.kind for r in own_records(store, "s-0007")] == ["saga.begin", "saga.end"]
        assert (tmp_path / INDEX_DIR / INDEX_NAME).exists()


WRITER = """
import sys
from agent_saga import Entry, FileLogStore
home, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
with FileLogStore(home, segment_records=97) as store:
    for n in range(count):
        sid = f"{name}-{n:04d}"
        store.append([Entry("saga.begin", sid, {"name": name}, n)], sync=n % 5 == 0)
        store.append([Entry("step.intent", sid, {"ordinal": 1, "tool": "t"}, n)], sync=False)
        if n % 7:
            store.append([Entry("saga.end", sid, {"status": "committed"}, n)], sync=False)
"""


def test_writers_in_several_processes_keep_the_index_answering_as_the_log(
    tmp_path: Path,
) -> None:
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), f"w{i}", "150"])
        for i in range(3)
    ]
    reader = SagaIndex(tmp_path, Chain())
    while any(p.poll() is None for p in procs):  # a reader catching up meanwhile
        if (tmp_path / "log.jsonl").exists():
            reader.refresh()
        time.sleep(0.05)
    assert [p.returncode for p in procs] == [0, 0, 0]
    full = full_history(tmp_path)
    assert len(full) == 450
    assert unfinished_views(reader) == [v for v in full if v.ended is None]
    assert newest_views(reader, limit=30) == list(reversed(full))[:30]
    for view in full[::37]:
        assert find_indexed(reader, view.id) == view
    reader.close()


REBUILDER = """
import sys
from pathlib import Path
from agent_saga._log.chain import Chain
from agent_saga._log.codec import JSONValue
from agent_saga._log.sagaindex import SagaIndex
index = SagaIndex(Path(sys.argv[1]), Chain())
print("go", flush=True)
index.rebuild()
"""


@pytest.mark.parametrize("delay", [0.0, 0.1, 0.4])
def test_a_process_killed_while_indexing_leaves_an_index_the_next_reader_repairs(
    tmp_path: Path, delay: float
) -> None:
    entries = []
    for n in range(900):
        sid = f"s-{n:05d}"
        entries.append(Entry("saga.begin", sid, {"name": "x"}, n))
        if n % 11:
            entries.append(Entry("saga.end", sid, {"status": "committed"}, n))
    write_log(tmp_path, entries, segment_records=400)
    child = subprocess.Popen(
        [sys.executable, "-c", REBUILDER, str(tmp_path)], stdout=subprocess.PIPE
    )
    assert child.stdout is not None
    assert child.stdout.readline() == b"go\n"
    time.sleep(delay)
    child.send_signal(signal.SIGKILL)
    child.wait()
    child.stdout.close()
    index = SagaIndex(tmp_path, Chain())
    full = full_history(tmp_path)
    assert unfinished_views(index) == [v for v in full if v.ended is None]
    assert (
        newest_views(index, limit=5, status=SagaStatus.COMMITTED)
        == [v for v in reversed(full) if v.status is SagaStatus.COMMITTED][:5]
    )
    assert find_indexed(index, "s-00700") == find_saga(full, "s-00700")
    index.close()


def test_sagas_pages_newest_first_with_limit_since_and_status(tmp_path: Path) -> None:
    from agent_saga.cli import main
    from click.testing import CliRunner

    entries = []
    for n in range(12):
        sid = f"s-{n:03d}"
        entries.append(Entry("saga.begin", sid, {"name": f"name-{n}"}, 1_700_000_000_000 + n))
        status = "committed" if n % 3 else "rolled_back"
        entries.append(Entry("saga.end", sid, {"status": status}, 1_700_000_000_000 + n))
    write_log(tmp_path, entries, segment_records=5)

    def ids(*args: str) -> list[str]:
        result = CliRunner().invoke(main, ["--home", str(tmp_path), "sagas", *args])
        assert result.exit_code == 0, result.output
        return [line.split()[0] for line in result.stdout.splitlines()[1:]]

    assert ids("--limit", "3") == ["s-011", "s-010", "s-009"]
    assert ids("--limit", "2", "--status", "rolled_back") == ["s-009", "s-006"]
    assert ids("--since", "2023-11-14T22:13:20.010") == ["s-011", "s-010"]
    assert (tmp_path / INDEX_DIR / INDEX_NAME).exists()  # answered through the index
    bad = CliRunner().invoke(main, ["--home", str(tmp_path), "sagas", "--since", "soon"])
    assert bad.exit_code == 2
    assert "--since 'soon'" in bad.output


def test_an_index_point_that_does_not_parse_is_rebuilt_and_never_fails_a_write(
    tmp_path: Path,
) -> None:
    with FileLogStore(tmp_path) as store:
        store.append([Entry("saga.begin", "s-0", {"name": "x"}, 0)], sync=True)
    index = SagaIndex(tmp_path, Chain())
    assert find_indexed(index, "s-0") is not None
    index.close()
    with sqlite3.connect(tmp_path / INDEX_DIR / INDEX_NAME) as db:
        db.execute("UPDATE meta SET v = 'not a point' WHERE k = 'point'")
    with FileLogStore(tmp_path) as store:  # the writer's hook reads the point every 256
        for n in range(1, 600):
            store.append([Entry("saga.begin", f"s-{n}", {"name": "x"}, n)], sync=False)
    assert find_indexed(index, "s-599") == find_saga(full_history(tmp_path), "s-599")
    index.close()
