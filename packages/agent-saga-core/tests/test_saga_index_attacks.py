"""Attacks on the saga index: a forged point, two indexers racing, a child forked while the
index is busy, an index that hides a saga's record. Each answer must equal a full read of the
log, or the reader must fall back to one; the writer must never see the index's trouble."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from agent_saga import Entry, FileLogStore, read_log
from agent_saga._history.sagareads import own_records, unfinished_sagas
from agent_saga._log.chain import Chain
from agent_saga._log.codec import JSONValue
from agent_saga._log.records import IN_SAGA
from agent_saga._log.sagaindex import INDEX_DIR, INDEX_NAME, IndexMismatch, SagaIndex


def begin(sid: str, n: int = 0) -> Entry:
    return Entry("saga.begin", sid, {"name": "x", "owner": "o"}, n)


def own_in_log(home: Path, sid: str) -> list[int]:
    return [r.seq for r in read_log(home) if r.saga == sid]


def test_a_malformed_point_in_the_index_never_reaches_the_writer_nor_a_reader(
    tmp_path: Path,
) -> None:
    with FileLogStore(tmp_path) as store:
        for n in range(300):
            store.append([begin(f"s-{n:04d}", n)], sync=False)
        assert [r.seq for r in own_records(store, "s-0001")] == own_in_log(tmp_path, "s-0001")
    with sqlite3.connect(tmp_path / INDEX_DIR / INDEX_NAME) as db:
        db.execute("UPDATE meta SET v = 'not a point' WHERE k = 'point'")
    with FileLogStore(tmp_path) as store:
        written = store.append([begin("late")], sync=False)  # the hook runs after this batch
        assert [r.saga for r in written] == ["late"]
        assert [r.seq for r in own_records(store, "late")] == own_in_log(tmp_path, "late")


def test_a_reader_whose_catch_up_races_another_indexer_still_sees_the_whole_log(
    tmp_path: Path,
) -> None:
    """Reader A checks the index's point; indexer B then indexes part of the log (it walked
    before the latest batch); A must not stop at B's point."""
    with FileLogStore(tmp_path) as store:
        store.append([begin("s-1")], sync=True)
    reader, other = SagaIndex(tmp_path, Chain()), SagaIndex(tmp_path, Chain())
    reader.refresh()
    other.refresh()
    with FileLogStore(tmp_path) as store:
        store.append([Entry("step.intent", "s-1", {"ordinal": 1, "tool": "t"}, 1)], sync=True)
    begins: list[str] = []

    def race(statement: str) -> None:  # runs as A's SQLite starts a statement, before it locks
        if statement != "BEGIN IMMEDIATE":
            return
        begins.append(statement)
        if len(begins) == 2:  # A checked the point and is about to index after it
            other.refresh()  # B indexes the log as it is now ...
            with FileLogStore(tmp_path) as store:  # ... and the log gains a batch after that
                store.append([Entry("saga.end", "s-1", {"status": "committed"}, 2)], sync=True)

    reader._connect().set_trace_callback(race)
    try:
        reader.refresh()
        got = [r.seq for r in reader.saga_records("s-1")]
    finally:
        reader.close()
        other.close()
    assert len(begins) >= 2
    assert got == own_in_log(tmp_path, "s-1")


HOLD = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
print("held", flush=True)
sys.stdin.read()
db.execute("ROLLBACK")
"""


def test_a_child_forked_while_another_thread_uses_the_index_reads_its_sagas(
    tmp_path: Path,
) -> None:
    with FileLogStore(tmp_path) as store:
        store.append([begin("s-1")], sync=True)
        assert store.saga_index is not None
        store.saga_index.refresh()
        blocker = subprocess.Popen(  # another process holds the index's write lock
            [sys.executable, "-c", HOLD, str(tmp_path / INDEX_DIR / INDEX_NAME)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )  # fmt: skip
        assert blocker.stdout is not None
        assert blocker.stdin is not None
        assert blocker.stdout.readline() == b"held\n"
        store.append([begin("s-2")], sync=True)
        busy = threading.Thread(target=store.saga_index.refresh)
        busy.start()  # it holds the index's thread lock while it waits
        time.sleep(0.3)
        pid = os.fork()
        if pid == 0:  # the child: its own reads must not wait on the parent's thread
            # (nor hold the blocker's stdin open: the parent's close must end the blocker)
            blocker.stdin.close()
            code = 0 if [r.saga for r in own_records(store, "s-2")] == ["s-2"] else 3
            os._exit(code)
        time.sleep(0.3)
        blocker.stdin.close()  # the parent's thread and the child may now index
        blocker.wait()
        blocker.stdout.close()
        deadline = time.monotonic() + 10
        status = 0
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.05)
        else:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            status = -1
        busy.join()
    assert status == 0


def placed(kind: str, sid: str, place: int, **data: object) -> Entry:
    """A record of saga ``sid`` as this version writes it: stating its place in the saga."""
    return Entry(kind, sid, {**data, IN_SAGA: place}, place)  # type: ignore[dict-item]


def test_an_index_that_hides_one_record_of_a_saga_is_not_believed(tmp_path: Path) -> None:
    with FileLogStore(tmp_path) as store:
        store.append([placed("saga.begin", "s-1", 0, name="x", owner="o")], sync=True)
        store.append([placed("step.intent", "s-1", 1, ordinal=1, tool="t")], sync=True)
        store.append([placed("step.done", "s-1", 2, ordinal=1, result=1)], sync=True)
        assert store.saga_index is not None
        store.saga_index.refresh()
    with sqlite3.connect(tmp_path / INDEX_DIR / INDEX_NAME) as db:
        db.execute("DELETE FROM records WHERE seq = 2")  # the step's intent
        db.execute("UPDATE sagas SET n = n - 1 WHERE id = 's-1'")
    with FileLogStore(tmp_path) as store:
        views = unfinished_sagas(store)
        assert [r.seq for r in own_records(store, "s-1")] == own_in_log(tmp_path, "s-1")
    assert [len(v.steps) for v in views] == [1]
    with sqlite3.connect(tmp_path / INDEX_DIR / INDEX_NAME) as db:  # rebuilt from the log
        assert db.execute("SELECT seq FROM records ORDER BY seq").fetchall() == [(1,), (2,), (3,)]


OWNER_DIES = """
import os, sys
from agent_saga import AgentKit
kit = AgentKit(home=sys.argv[1], checkpoints=False)
kit.compensator("undo", lambda x: None)
@kit.tool(compensate="undo")
def act(x: int) -> int:
    return x
with kit.transaction("t"):
    act(1)
    act(2)
    kit.store.saga_index.refresh()
    os._exit(0)  # the owner dies mid-saga
"""


def test_a_kit_recovers_the_step_an_index_hid_from_it(tmp_path: Path) -> None:
    """The same attack on records written by the engine: recovery still compensates the step
    whose intent the index hid."""
    from agent_saga import AgentKit

    home = tmp_path / "home"
    subprocess.run([sys.executable, "-c", OWNER_DIES, str(home)], check=True, timeout=120)
    intents = [r.seq for r in read_log(home) if r.kind == "step.intent"]
    with sqlite3.connect(home / INDEX_DIR / INDEX_NAME) as db:
        db.execute("DELETE FROM records WHERE seq = ?", (intents[0],))  # act(1)'s intent
        db.execute("UPDATE sagas SET n = n - 1")
    undone: list[int] = []
    kit = AgentKit(home=home, checkpoints=False)

    @kit.compensator("undo")
    def undo(x: int) -> None:
        undone.append(x)

    try:
        report = kit.recover()
    finally:
        kit.close()
    assert len(report.recovered) == 1
    assert undone == [2, 1]  # both steps, newest first


def test_an_index_that_hides_a_whole_unfinished_saga_is_not_believed(tmp_path: Path) -> None:
    with FileLogStore(tmp_path) as store:
        store.append([placed("saga.begin", "s-1", 0, name="x", owner="o")], sync=True)
        store.append([placed("saga.begin", "s-2", 0, name="y", owner="o")], sync=True)
        store.append([placed("step.intent", "s-2", 1, ordinal=1, tool="t")], sync=True)
        assert store.saga_index is not None
        store.saga_index.refresh()
    with sqlite3.connect(tmp_path / INDEX_DIR / INDEX_NAME) as db:
        db.execute("DELETE FROM records WHERE saga = 's-2'")
        db.execute("DELETE FROM sagas WHERE id = 's-2'")
    with FileLogStore(tmp_path) as store:
        assert [v.id for v in unfinished_sagas(store)] == ["s-1", "s-2"]


def test_a_saga_read_through_the_index_across_segments_and_far_apart_equals_the_log(
    tmp_path: Path,
) -> None:
    """Records of one saga are read together when near one another; far apart (beyond
    ``GAP``) and in several segments they are still read, each verified, in log order."""
    from agent_saga._log.indexpoint import GAP

    filler: dict[str, JSONValue] = {"blob": "x" * 4000, "owner": "o"}
    with FileLogStore(tmp_path, segment_records=25) as store:
        store.append([placed("saga.begin", "s-1", 0, name="x", owner="o")], sync=False)
        for n in range(60):
            store.append([Entry("saga.begin", f"f-{n}", filler, n)], sync=False)
            if n % 20 == 0:  # 20 records of 4 KB apart: more than GAP
                store.append([placed("step.intent", "s-1", n // 20 + 1, ordinal=n // 20 + 1,
                                     tool="t")], sync=False)  # fmt: skip
        store.append([placed("step.done", "s-1", 4, ordinal=3, result=1)], sync=False)
    assert GAP < 20 * 4000
    assert len(list((tmp_path / "segments").glob("*.jsonl"))) >= 2
    index = SagaIndex(tmp_path, Chain())
    index.refresh()
    read = index.saga_records("s-1")
    assert [(r.seq, r.hash) for r in read] == [
        (r.seq, r.hash) for r in read_log(tmp_path) if r.saga == "s-1"
    ]
    assert len(read) == 5


def test_an_index_row_with_a_forged_offset_or_length_is_not_believed(tmp_path: Path) -> None:
    """A negative offset, a zero or huge length: the index's reader says the index does not
    describe the log (no error of the operating system, no allocation of the forged size),
    and a store's reader falls back to the log."""
    with FileLogStore(tmp_path) as store:
        store.append([placed("saga.begin", "s-1", 0, name="x", owner="o")], sync=True)
        store.append([placed("step.intent", "s-1", 1, ordinal=1, tool="t")], sync=True)
        assert store.saga_index is not None
        store.saga_index.refresh()
    forged_places = (
        "off = -5", "len = 0", "len = 1 << 40", "off = 1 << 40", "off = 9223372036854775700",
        "off = 'abc'", "len = 2.5", "seg = 'a'", "seg = 0", "prev = 'zz'", "hash = 'zz'",
    )  # fmt: skip
    for forged in forged_places:
        with sqlite3.connect(tmp_path / INDEX_DIR / INDEX_NAME) as db:
            db.execute(f"UPDATE records SET {forged} WHERE seq = 2")
        with pytest.raises(IndexMismatch):
            SagaIndex(tmp_path, Chain()).saga_records("s-1")
        with FileLogStore(tmp_path) as store:
            assert [r.seq for r in own_records(store, "s-1")] == [1, 2], forged


def test_index_rows_spanning_more_than_memory_are_not_read_in_one_piece(tmp_path: Path) -> None:
    """Rows of other sagas (``own = 0``) placed a little apart across a huge span: the reader
    reads at most ``RUN_BYTES`` at once and refuses places beyond the segment's end, so a forged
    index costs a mismatch, never an allocation of the span."""
    from agent_saga._log.chain import MAX_RECORD_BYTES
    from agent_saga._log.indexpoint import GAP

    with FileLogStore(tmp_path) as store:
        store.append([placed("saga.begin", "s-1", 0, name="x", owner="o")], sync=True)
        store.append([placed("step.intent", "s-1", 1, ordinal=1, tool="t")], sync=True)
        assert store.saga_index is not None
        store.saga_index.refresh()
    length = MAX_RECORD_BYTES + 1
    with sqlite3.connect(tmp_path / INDEX_DIR / INDEX_NAME) as db:
        (row,) = db.execute("SELECT prev, hash FROM records WHERE seq = 2").fetchall()
        db.executemany(
            "INSERT INTO records VALUES (?, 's-1', 0, 1, ?, ?, ?, ?)",
            [(100 + n, 10**6 + n * (length + GAP), length, *row) for n in range(10_000)],
        )
    with pytest.raises(IndexMismatch):
        SagaIndex(tmp_path, Chain()).saga_records("s-1")
    with FileLogStore(tmp_path) as store:
        assert [r.seq for r in own_records(store, "s-1")] == [1, 2]


def test_forged_rows_over_one_span_are_refused_at_the_first_without_buffering_them(
    tmp_path: Path,
) -> None:
    """Thousands of forged rows of one saga, each within the segment and each read within the
    1 MiB limit but all over the same large span: the first that is not its record ends the
    read, before the others' bytes are copied (memory stays far below rows x span)."""
    import tracemalloc

    filler: dict[str, JSONValue] = {"blob": "x" * 4000, "owner": "o"}
    with FileLogStore(tmp_path) as store:
        store.append([placed("saga.begin", "s-1", 0, name="x", owner="o")], sync=True)
        for n in range(200):
            store.append([Entry("saga.begin", f"f-{n}", filler, n)], sync=False)
        assert store.saga_index is not None
        store.saga_index.refresh()
    span = 600_000
    with sqlite3.connect(tmp_path / INDEX_DIR / INDEX_NAME) as db:
        db.executemany(
            "INSERT INTO records VALUES (?, 's-1', 1, 1, ?, ?, ?, ?)",
            [(10_000 + n, n, span, b"\0" * 32, b"\0" * 32) for n in range(2000)],
        )
        db.execute("UPDATE sagas SET n = n + 2000, last_seq = 11999 WHERE id = 's-1'")
    index = SagaIndex(tmp_path, Chain())
    tracemalloc.start()
    try:
        with pytest.raises(IndexMismatch):
            index.saga_records("s-1")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20_000_000, peak  # one run (1 MiB) and its copies, not 2,000 x 600 KB
    with FileLogStore(tmp_path) as store:
        assert [r.seq for r in own_records(store, "s-1")] == [1]
