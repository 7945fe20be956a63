"""Attacks on the saga index's ``sagas`` table, each saga's line (its age, status, count, the
key prefixes are matched on): a line edited, deleted or invented. What is read through it must
equal a full read of the log: an edited line is caught when its saga is read, and a "no such
saga" or "ambiguous" answer is checked before it is given."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from agent_saga import Entry, FileLogStore, read_log
from agent_saga._history.build import build_history
from agent_saga._history.indexed import find_indexed, newest_views
from agent_saga._history.sagareads import own_records
from agent_saga._history.views import AmbiguousSagaError, UnknownSagaError
from agent_saga._log.chain import Chain
from agent_saga._log.sagaindex import INDEX_DIR, INDEX_NAME, SagaIndex
from agent_saga.cli import main
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_saga_index import saga_scripts, write_log

IDS = ("0193b5e2-7c1a-7000-8000-0000000000a1", "0193b5e2-7c1a-7000-8000-0000000000b1")
FAKE = "0193b5e2-7c1a-7000-8000-0000000000a2"
"""Shares IDS[0]'s first 35 characters, and no record."""


def write_sagas(home: Path) -> None:
    """Two sagas, one committed and one failed, each of three records, then an index of them."""
    with FileLogStore(home) as store:
        for n, (sid, status) in enumerate(zip(IDS, ("committed", "failed"), strict=True)):
            store.append(
                [Entry("saga.begin", sid, {"name": "x", "owner": "o"}, 10 * n),
                 Entry("step.intent", sid, {"ordinal": 1, "tool": "t"}, 10 * n + 1),
                 Entry("saga.end", sid, {"status": status}, 10 * n + 2)],
                sync=True,
            )  # fmt: skip
        assert [r.saga for r in own_records(store, IDS[0])] == [IDS[0]] * 3  # indexed


def edit(home: Path, sql: str, *args: object) -> None:
    with sqlite3.connect(home / INDEX_DIR / INDEX_NAME) as db:
        assert db.execute(sql, args).rowcount == 1


def line(home: Path, sid: str) -> tuple[object, ...]:
    with sqlite3.connect(home / INDEX_DIR / INDEX_NAME) as db:
        row = db.execute("SELECT * FROM sagas WHERE id = ?", (sid,)).fetchone()
    assert row is not None
    return tuple(row)


@pytest.mark.parametrize(
    ("column", "value"),
    [("started", 999_999), ("first_seq", 0), ("end_status", "committed"), ("n", 2),
     ("began", None), ("ended", 1)],
)  # fmt: skip
def test_an_edited_line_is_caught_when_its_saga_is_read_and_the_index_rebuilt(
    tmp_path: Path, column: str, value: object
) -> None:
    write_sagas(tmp_path)
    before = line(tmp_path, IDS[1])
    edit(tmp_path, f"UPDATE sagas SET {column} = ? WHERE id = ?", value, IDS[1])
    assert line(tmp_path, IDS[1]) != before
    index = SagaIndex(tmp_path, Chain())
    view = find_indexed(index, IDS[1])
    truth = {v.id: v for v in build_history(list(read_log(tmp_path))).sagas}
    assert (view.id, view.status, view.started) == (IDS[1], truth[IDS[1]].status, 10)
    assert line(tmp_path, IDS[1]) == before  # rebuilt from the log
    index.close()


def test_a_listing_shows_no_saga_whose_line_was_edited(tmp_path: Path) -> None:
    write_sagas(tmp_path)
    edit(tmp_path, "UPDATE sagas SET end_status = 'committed' WHERE id = ?", IDS[1])
    index = SagaIndex(tmp_path, Chain())
    views = newest_views(index, limit=5)
    truth = build_history(list(read_log(tmp_path))).sagas[::-1]
    assert [(v.id, v.status) for v in views] == [(v.id, v.status) for v in truth]
    assert views[0].status.value != "committed"
    index.close()


def test_a_saga_whose_line_was_deleted_is_still_found_by_replay(tmp_path: Path) -> None:
    write_sagas(tmp_path)
    edit(tmp_path, "DELETE FROM sagas WHERE id = ?", IDS[0])
    for asked in (IDS[0], IDS[0][:35].upper().replace("-", "")):
        result = CliRunner().invoke(main, ["--home", str(tmp_path), "replay", asked])
        assert result.exit_code == 0, result.output
        assert IDS[0] in result.output
    assert line(tmp_path, IDS[0])[0] == IDS[0]


def test_a_line_whose_key_was_edited_is_still_found_by_its_prefix(tmp_path: Path) -> None:
    write_sagas(tmp_path)
    edit(tmp_path, "UPDATE sagas SET key = 'zz' WHERE id = ?", IDS[1])
    index = SagaIndex(tmp_path, Chain())
    assert find_indexed(index, IDS[1][:36]).id == IDS[1]
    index.close()


def invent(home: Path) -> None:
    edit(
        home, "INSERT INTO sagas SELECT ?, ?, first_seq, last_seq, started, n, end_status, "
        "began, ended FROM sagas WHERE id = ?", FAKE, FAKE.replace("-", ""), IDS[0],
    )  # fmt: skip


def test_an_invented_line_makes_no_prefix_ambiguous_and_no_saga_exist(tmp_path: Path) -> None:
    write_sagas(tmp_path)
    invent(tmp_path)
    index = SagaIndex(tmp_path, Chain())
    assert find_indexed(index, IDS[0][:35]).id == IDS[0]
    assert [r[0] for r in index.select("SELECT id FROM sagas ORDER BY id")] == list(IDS)
    with pytest.raises(AmbiguousSagaError):  # the two real sagas share this one
        find_indexed(index, IDS[0][:34])
    index.close()
    invent(tmp_path)
    result = CliRunner().invoke(main, ["--home", str(tmp_path), "replay", FAKE])
    assert result.exit_code == 2
    assert "no saga matches" in result.output
    invent(tmp_path)
    index = SagaIndex(tmp_path, Chain())
    with pytest.raises(UnknownSagaError):
        find_indexed(index, FAKE)
    index.close()


TAMPERINGS = {
    "a saga deleted from both tables": (
        "DELETE FROM sagas WHERE id = :b", "DELETE FROM records WHERE saga = :b"),
    "a status edited": ("UPDATE sagas SET end_status = 'committed' WHERE id = :b",),
    "an age edited": ("UPDATE sagas SET started = started + 1 WHERE id = :b",),
    "a first record moved": ("UPDATE sagas SET first_seq = first_seq + 1 WHERE id = :b",),
    "a line invented": (
        "INSERT INTO sagas SELECT 'x' || id, key, first_seq, last_seq, started, n, end_status,"
        " began, ended FROM sagas WHERE id = :a",),
    "a row given to the other saga": ("UPDATE records SET saga = :a WHERE seq = 5",),
    "a saga.end removed from both tables": (
        "DELETE FROM records WHERE seq = 6",
        "UPDATE sagas SET n = 2, last_seq = 5, end_status = NULL, ended = NULL WHERE id = :b"),
    "a first saga.end moved": ("UPDATE sagas SET ended = NULL WHERE id = :b",),
    "a saga.begin unnamed": ("UPDATE sagas SET began = NULL WHERE id = :a",),
    "a key edited": ("UPDATE sagas SET key = 'zz' WHERE id = :a",),
    "a row past the indexed point": (
        "INSERT INTO records SELECT seq + 100, saga, own, seg, off, len, prev, hash FROM records"
        " WHERE seq = 1",),
}  # fmt: skip


def verify(home: Path) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["--home", str(home), "verify"])
    return result.exit_code, result.output.replace("\n", " ")


@pytest.mark.parametrize("how", sorted(TAMPERINGS))
def test_a_full_verify_finds_every_edit_of_the_index_and_rebuilds_it(
    tmp_path: Path, how: str
) -> None:
    write_sagas(tmp_path)
    code, output = verify(tmp_path)
    assert code == 0
    assert "saga index: agrees with the log (every row and line, up to record 6)" in output
    with sqlite3.connect(tmp_path / INDEX_DIR / INDEX_NAME) as db:
        for sql in TAMPERINGS[how]:
            assert db.execute(sql, {"a": IDS[0], "b": IDS[1]}).rowcount >= 1
    code, output = verify(tmp_path)
    assert code == 1
    assert "log intact: 6 records" in output
    assert "saga index: DIFFERS from the log: " in output
    assert "rebuilt from the log" in output
    assert verify(tmp_path)[0] == 0  # rebuilt: it agrees again
    listed = CliRunner().invoke(main, ["--home", str(tmp_path), "sagas", "--limit", "5"])
    assert [n for n in IDS if n in listed.output] == list(IDS)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries=saga_scripts(), segment_records=st.sampled_from([3, 7, 1000]))
def test_an_index_built_from_the_log_agrees_with_it(
    tmp_path_factory: pytest.TempPathFactory, entries: list[Entry], segment_records: int
) -> None:
    """No false alarm: sagas interleaved across segments, ended twice with two statuses,
    settled, never begun, and records of no saga."""
    home = tmp_path_factory.mktemp("home")
    write_log(home, entries, segment_records)
    index = SagaIndex(home, Chain())
    index.refresh()
    index.close()
    code, output = verify(home)
    assert code == 0, output
    assert f"every row and line, up to record {len(entries)}" in output


def replay(home: Path, asked: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["--home", str(home), "replay", asked])
    return result.exit_code, result.output


def index_of(home: Path, entries: list[Entry]) -> None:
    write_log(home, entries, 1000)
    index = SagaIndex(home, Chain())
    index.refresh()
    index.close()


def test_a_status_given_to_a_running_saga_is_found_by_verify(tmp_path: Path) -> None:
    """The line of a saga with no saga.end, edited to a status, drops it from `sagas --status
    running`: no record of it is read then, so a full verify must find the line."""
    index_of(tmp_path, [Entry("saga.begin", "run1", {"name": "a"}, 1)])
    edit(tmp_path, "UPDATE sagas SET end_status = 'committed' WHERE id = 'run1'")
    code, output = verify(tmp_path)
    assert code == 1
    assert "saga index: DIFFERS from the log: the line of saga run1" in output
    listed = CliRunner().invoke(main, ["--home", str(tmp_path), "sagas", "--status", "running"])
    assert "run1" in listed.output


@pytest.mark.parametrize(
    "sql", ["DROP TABLE records", "ALTER TABLE records RENAME COLUMN own TO other"]
)
def test_an_index_sqlite_cannot_read_is_a_difference_not_a_traceback(
    tmp_path: Path, sql: str
) -> None:
    write_sagas(tmp_path)
    with sqlite3.connect(tmp_path / INDEX_DIR / INDEX_NAME) as db:
        db.execute(sql)
    code, output = verify(tmp_path)
    assert code == 1
    assert "saga index: DIFFERS from the log: the index cannot be read" in output
    assert "Traceback" not in output
    assert verify(tmp_path)[0] == 0


def test_a_deleted_line_changes_no_answer_to_a_prefix_typed_otherwise(tmp_path: Path) -> None:
    """Upper-case ids with dashes, asked in lower case without them; and a prefix two sagas
    share, one of whose lines is deleted."""
    begin = {"name": "x", "owner": "o"}
    index_of(tmp_path, [Entry("saga.begin", s, dict(begin), 1) for s in ("Run-1", "ab1", "ab2")])
    edit(tmp_path, "DELETE FROM sagas WHERE id = 'Run-1'")
    code, output = replay(tmp_path, "run1")
    assert code == 0, output
    assert "Run-1" in output
    edit(tmp_path, "DELETE FROM sagas WHERE id = 'ab2'")
    code, output = replay(tmp_path, "ab")
    assert code == 2
    assert "ambiguous: 2 sagas match: ab1, ab2" in output


def test_a_prefix_of_an_id_beyond_the_basic_plane_is_found(tmp_path: Path) -> None:
    index_of(tmp_path, [Entry("saga.begin", "ab\U0001f600z", {"name": "x", "owner": "o"}, 1)])
    code, output = replay(tmp_path, "ab")
    assert code == 0, output
    assert "ab\U0001f600z" in output


def test_an_index_of_another_log_is_not_compared_and_readers_rebuild_it(tmp_path: Path) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    index_of(old, [Entry("saga.begin", "old", {"name": "x", "owner": "o"}, 1)] * 2)
    write_log(new, [Entry("saga.begin", "new", {"name": "y", "owner": "o"}, 2)] * 3, 1000)
    (new / INDEX_DIR).mkdir()
    (new / INDEX_DIR / INDEX_NAME).write_bytes((old / INDEX_DIR / INDEX_NAME).read_bytes())
    code, output = verify(new)
    assert code == 0, output
    assert "saga index: not compared: it was built from another log" in output
    assert replay(new, "new")[0] == 0
    assert "saga index: agrees with the log" in verify(new)[1]
