"""The signed statement of the unfinished sagas: each checkpoint commits to them (the kit's,
and those ``agent-saga checkpoint``, ``certify`` and ``certify --since`` publish, counted from
the records they read), and a reader that takes them from the saga index believes the index
only as far as that statement and the log after it agree with it. An index edited to hide a
whole unfinished saga, begun before or after the latest statement, is caught; checkpoints
written before the statement existed (or forged) leave readers reading the whole log, never
trusting the index."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from agent_saga import CorruptLogError, Entry, FileLogStore
from agent_saga._history.build import sagas
from agent_saga._history.sagareads import unfinished_sagas
from agent_saga._kit.stores import trust_checkpoints
from agent_saga._log.codec import JSONValue
from agent_saga._log.indexsets import unfinished_at, unfinished_through
from agent_saga._log.records import IN_SAGA
from agent_saga._log.sagaindex import INDEX_DIR, INDEX_NAME
from agent_saga._log.source import FileLogSource
from agent_saga._log.unfinishedset import Statement, commitment, extension_line, statement_of
from agent_saga.cli import main
from agent_saga.proofs._audit import LogSnapshot, publish, snapshot
from agent_saga.proofs._checkpoint import Checkpoint
from agent_saga.proofs._checkpoints import Checkpointer, CheckpointLog
from agent_saga.proofs._resume import load_point
from agent_saga.proofs._signing import home_signer, home_verifier
from click.testing import CliRunner, Result


def begin(sid: str) -> Entry:
    return Entry("saga.begin", sid, {"name": "x", "owner": "o", IN_SAGA: 0}, 0)


def end(sid: str, place: int = 1) -> Entry:
    return Entry("saga.end", sid, {"status": "committed", IN_SAGA: place}, 0)


def hide(home: Path, sid: str) -> None:
    """What the attacker does: the saga's rows leave the index; the log is untouched."""
    with sqlite3.connect(home / INDEX_DIR / INDEX_NAME) as db:
        db.execute("DELETE FROM records WHERE saga = ?", (sid,))
        db.execute("DELETE FROM sagas WHERE id = ?", (sid,))


def indexed_sagas(home: Path) -> list[str]:
    with sqlite3.connect(home / INDEX_DIR / INDEX_NAME) as db:
        return [r[0] for r in db.execute("SELECT id FROM sagas ORDER BY first_seq")]


def latest(home: Path) -> Checkpoint:
    verifier = home_verifier(home)
    assert verifier is not None
    found = CheckpointLog(home).latest([verifier])
    assert found is not None
    return found


def unfinished_ids(home: Path) -> list[str]:
    """What recovery sees, read as a kit reads it (the index checked against the home's
    latest signed checkpoint)."""
    with FileLogStore(home) as store:
        trust_checkpoints(store, home)
        return [view.id for view in unfinished_sagas(store)]


def test_each_checkpoint_signs_the_sagas_unfinished_at_its_size(tmp_path: Path) -> None:
    with FileLogStore(tmp_path) as store:
        store.append([begin("s-1"), begin("s-2"), begin("s-0"), end("s-0")], sync=True)
        checkpointer = Checkpointer(tmp_path, store)
        first = checkpointer.checkpoint()
        store.append([end("s-1"), begin("s-3")], sync=True)
        second = checkpointer.checkpoint()
    assert statement_of(first.size, first.extensions) == Statement(4, *commitment(["s-2", "s-1"]))
    assert second.extensions == (extension_line(["s-2", "s-3"]),)
    assert latest(tmp_path).extensions == second.extensions  # inside the signed body


def test_a_saga_hidden_that_was_unfinished_at_the_statement_is_caught(tmp_path: Path) -> None:
    with FileLogStore(tmp_path) as store:
        store.append([begin("s-1"), begin("s-2"), begin("s-3")], sync=True)
        Checkpointer(tmp_path, store).checkpoint()
        store.append([end("s-1"), end("s-3")], sync=True)  # s-1 ends after the statement
        assert store.saga_index is not None
        store.saga_index.refresh()
    hide(tmp_path, "s-2")
    assert unfinished_ids(tmp_path) == ["s-2"]
    assert indexed_sagas(tmp_path) == ["s-1", "s-2", "s-3"]  # rebuilt from the log


def test_a_saga_hidden_that_began_after_the_last_statement_is_caught(tmp_path: Path) -> None:
    with FileLogStore(tmp_path) as store:
        store.append([begin("s-1")], sync=True)
        Checkpointer(tmp_path, store).checkpoint()
        store.append([begin("s-2")], sync=True)
        intent = Entry("step.intent", "s-2", {"ordinal": 1, "tool": "t", IN_SAGA: 1}, 1)
        store.append([intent], sync=True)
        assert store.saga_index is not None
        store.saga_index.refresh()
    hide(tmp_path, "s-2")
    assert unfinished_ids(tmp_path) == ["s-1", "s-2"]


def test_the_index_is_believed_up_to_the_statement_and_the_log_read_after_it(
    tmp_path: Path,
) -> None:
    """The reader does not read the log before the statement: a record there that the fast
    walk would refuse (edited on disk after the store opened) is never reached, while a walk
    from the start fails on it."""
    with FileLogStore(tmp_path) as store:
        store.append([begin("s-1"), end("s-1"), begin("s-2")], sync=True)
        Checkpointer(tmp_path, store).checkpoint()
        store.append([begin("s-3")], sync=True)
        assert store.saga_index is not None
        store.saga_index.refresh()
        index = store.saga_index
        statement = statement_of(latest(tmp_path).size, latest(tmp_path).extensions)
        assert statement is not None
        assert unfinished_through(index, None, 2) == []
        assert unfinished_through(index, statement, 4) == ["s-2", "s-3"]
        (log,) = [p for p in tmp_path.rglob("*.jsonl") if b'"seq":1,' in p.read_bytes()]
        log.write_bytes(log.read_bytes().replace(b'"seq":1,', b'"seq":9,', 1))  # same length
        with pytest.raises(CorruptLogError, match="seq 9 where 1"):
            unfinished_through(index, None, 4)
        assert unfinished_through(index, statement, 4) == ["s-2", "s-3"]


def test_a_checkpoint_without_the_statement_leaves_the_whole_log_read(tmp_path: Path) -> None:
    """A home whose latest checkpoint came from an earlier version (no statement line), or
    whose statement was edited (its signature fails): readers walk the whole log, so the
    hidden saga is still caught; the next checkpoint carries the statement again."""
    with FileLogStore(tmp_path) as store:
        store.append([begin("s-1"), begin("s-2")], sync=True)
        signer = home_signer(tmp_path)
        old = Checkpointer(tmp_path, store)
        old.tree.update()
        CheckpointLog(tmp_path).publish_head(old.tree.size, old.tree.root(), {}, signer)
        assert latest(tmp_path).extensions == ()
        assert store.saga_index is not None
        store.saga_index.refresh()
    hide(tmp_path, "s-1")
    assert unfinished_ids(tmp_path) == ["s-1", "s-2"]
    note = CheckpointLog(tmp_path).latest_path
    forged = Checkpoint(signer.name, 2, latest(tmp_path).root, (extension_line(["s-2"]),))
    signature = note.read_text().split("\n\n", 1)[1]
    note.write_text(forged.body() + "\n" + signature)  # a statement the key never signed
    hide(tmp_path, "s-1")
    assert unfinished_ids(tmp_path) == ["s-1", "s-2"]
    with FileLogStore(tmp_path) as store:
        note.unlink()
        store.append([end("s-2")], sync=True)
        assert Checkpointer(tmp_path, store).checkpoint().extensions == (extension_line(["s-1"]),)


def test_a_checkpointer_resuming_after_a_prefix_counts_from_the_statement_or_the_log(
    tmp_path: Path,
) -> None:
    """Resumed from its stored frontier, the checkpointer takes the index's set at the
    previous statement only when it matches it; an index edited meanwhile makes it count the
    whole log instead, so what it signs never rests on the index."""
    with FileLogStore(tmp_path) as store:
        store.append([begin("s-1"), begin("s-2")], sync=True)
        Checkpointer(tmp_path, store).checkpoint()
        assert store.saga_index is not None
        store.saga_index.refresh()
    hide(tmp_path, "s-1")
    with FileLogStore(tmp_path) as store:
        store.append([begin("s-3")], sync=True)
        resumed = Checkpointer(tmp_path, store)
        signed = resumed.checkpoint()
        assert resumed._resumed_at == 2  # it started after the first checkpoint's records
    assert signed.extensions == (extension_line(["s-1", "s-2", "s-3"]),)
    with FileLogStore(tmp_path) as store:
        store.append([end("s-3", 1)], sync=True)
        signed = Checkpointer(tmp_path, store).checkpoint()
    assert signed.extensions == (extension_line(["s-1", "s-2"]),)


def test_an_ended_saga_the_index_shows_unfinished_is_not_believed(tmp_path: Path) -> None:
    """The index's rows of a committed saga's ``saga.end`` are deleted: recovery must not see
    it as unfinished (it would compensate a committed saga)."""
    with FileLogStore(tmp_path) as store:
        store.append([begin("s-1"), begin("s-2"), end("s-1")], sync=True)
        Checkpointer(tmp_path, store).checkpoint()
        store.append([begin("s-3"), end("s-3")], sync=True)
        assert store.saga_index is not None
        store.saga_index.refresh()
    with sqlite3.connect(tmp_path / INDEX_DIR / INDEX_NAME) as db:
        for sid, seq in (("s-1", 3), ("s-3", 5)):
            db.execute("DELETE FROM records WHERE seq = ?", (seq,))
            db.execute(
                "UPDATE sagas SET n = 1, last_seq = first_seq, end_status = NULL, ended = NULL "
                "WHERE id = ?",
                (sid,),
            )
    assert unfinished_ids(tmp_path) == ["s-2"]


# -- the checkpoints the commands publish ---------------------------------------------------


def cli(home: Path, *args: str) -> Result:
    return CliRunner().invoke(main, ["--home", str(home), *args])


def own(kind: str, sid: str, place: int, **data: JSONValue) -> Entry:
    return Entry(kind, sid, {**data, IN_SAGA: place}, 0)


def crashed_log(home: Path, *, first: int = 0) -> None:
    """A committed saga, a crashed one (``s-<first+1>``: begun, a step's intent, no end), and
    another committed saga: six records."""
    a, b, c = (f"s-{first + n}" for n in range(3))
    with FileLogStore(home) as store:
        store.append(
            [
                own("saga.begin", a, 0, name="x", owner="gone"),
                own("saga.end", a, 1, status="committed"),
                own("saga.begin", b, 0, name="x", owner="gone"),
                own("step.intent", b, 1, ordinal=1, tool="t"),
                own("saga.begin", c, 0, name="x", owner="gone"),
                own("saga.end", c, 1, status="committed"),
            ],
            sync=True,
        )


def suspended(home: Path, sid: str) -> None:
    """A saga suspended until far in the future: unfinished, and no CRITICAL for certify."""
    with FileLogStore(home) as store:
        store.append(
            [
                own("saga.begin", sid, 0, name="x", owner="gone"),
                own("saga.suspended", sid, 1, expires_at=1 << 50),
            ],
            sync=True,
        )


def test_the_checkpoint_command_signs_the_crashed_saga_and_the_index_is_trusted_after_it(
    tmp_path: Path,
) -> None:
    crashed_log(tmp_path)
    result = cli(tmp_path, "checkpoint")
    assert result.exit_code == 0, result.output
    assert latest(tmp_path).extensions == (extension_line(["s-1"]),)
    with FileLogStore(tmp_path) as store:
        assert store.saga_index is not None
        store.saga_index.refresh()
    hide(tmp_path, "s-1")
    assert unfinished_ids(tmp_path) == ["s-1"]  # the lying index is caught, and rebuilt
    with FileLogStore(tmp_path) as store:
        trust_checkpoints(store, tmp_path)
        index = store.saga_index
        assert index is not None
        index.refresh()
        (log,) = [p for p in tmp_path.rglob("*.jsonl") if b'"seq":1,' in p.read_bytes()]
        log.write_bytes(log.read_bytes().replace(b'"seq":1,', b'"seq":9,', 1))  # same length
        # the reader stops at the signed statement: the record edited before it is not read
        assert [view.id for view in unfinished_sagas(store)] == ["s-1"]
        with pytest.raises(CorruptLogError, match="seq 9 where 1"):
            unfinished_through(index, None, 6)  # what a reader without the statement reads


def test_an_unkeyed_home_is_read_in_full_until_the_checkpoint_command_makes_its_key(
    tmp_path: Path,
) -> None:
    """No signing key: readers find no statement and walk the whole log (the hidden saga is
    caught) without creating a key; ``agent-saga checkpoint`` creates it and signs one."""
    crashed_log(tmp_path)
    with FileLogStore(tmp_path) as store:
        assert store.saga_index is not None
        store.saga_index.refresh()
    hide(tmp_path, "s-1")
    assert unfinished_ids(tmp_path) == ["s-1"]
    assert not (tmp_path / "keys").exists()
    assert cli(tmp_path, "checkpoint").exit_code == 0
    assert (tmp_path / "keys" / "checkpoint.pub").exists()
    assert latest(tmp_path).extensions == (extension_line(["s-1"]),)


def test_a_resumed_snapshot_starts_from_the_set_its_point_signs_checked(tmp_path: Path) -> None:
    crashed_log(tmp_path)
    assert cli(tmp_path, "checkpoint").exit_code == 0
    assert cli(tmp_path, "verify").exit_code == 0  # a resume point at record 6
    crashed_log(tmp_path, first=3)  # s-4 crashes after it
    verifier = home_verifier(tmp_path)
    assert verifier is not None

    def resumed() -> LogSnapshot:
        point, _ = load_point(tmp_path, 6, [verifier])
        assert point is not None
        source = FileLogSource(tmp_path)
        return snapshot(source, keep_records=False, home=tmp_path, resume=point, unfinished=True)

    log = resumed()
    assert log.stream is not None
    assert log.stream.resumed_from == 6
    assert log.unfinished == ("s-1", "s-4")
    hide(tmp_path, "s-1")  # the index's set no longer matches the point's statement
    log = resumed()
    assert log.stream is not None
    assert log.stream.resumed_from == 0
    assert "read from its first record" in log.stream.notes[0]
    assert log.unfinished == ("s-1", "s-4")
    assert publish(tmp_path, log).extensions == (extension_line(["s-1", "s-4"]),)


def test_a_resume_point_whose_checkpoint_signs_no_statement_is_not_used(tmp_path: Path) -> None:
    crashed_log(tmp_path)
    with FileLogStore(tmp_path) as store:
        old = Checkpointer(tmp_path, store)
        old.tree.update()  # as an earlier version published: no statement line
        CheckpointLog(tmp_path).publish_head(6, old.tree.root(), {}, home_signer(tmp_path))
    assert cli(tmp_path, "verify").exit_code == 0
    crashed_log(tmp_path, first=3)
    result = cli(tmp_path, "certify", "--since", "6")
    assert "read from record 1" in result.output
    assert "no unfinished sagas checked against a statement signed" in result.output
    assert result.exit_code == 1  # the crashed sagas are CRITICAL: nothing is published
    assert latest(tmp_path).size == 6


def test_certify_since_publishes_the_statement_from_a_resumed_pass(tmp_path: Path) -> None:
    with FileLogStore(tmp_path) as store:
        store.append([begin("s-0"), end("s-0")], sync=True)
    suspended(tmp_path, "s-1")
    assert cli(tmp_path, "checkpoint").exit_code == 0
    assert cli(tmp_path, "verify").exit_code == 0
    suspended(tmp_path, "s-2")
    result = cli(tmp_path, "certify", "--since", "latest")
    assert result.exit_code == 0, result.output
    assert "read from record 5 (the resume point of 4 records" in result.output
    assert latest(tmp_path).size == 6
    assert latest(tmp_path).extensions == (extension_line(["s-1", "s-2"]),)
    hide(tmp_path, "s-2")
    assert unfinished_ids(tmp_path) == ["s-1", "s-2"]
    assert cli(tmp_path, "certify").exit_code == 0  # a full certify signs the same set
    assert latest(tmp_path).extensions == (extension_line(["s-1", "s-2"]),)


def test_a_saga_without_a_begin_counts_as_unfinished_as_recovery_sees_it(tmp_path: Path) -> None:
    """A hand-made or damaged log: a saga whose records have no ``saga.begin``. Recovery (a
    full read or through the index) finishes it; the statement lists it, so an index that
    hides it is caught."""
    with FileLogStore(tmp_path) as store:
        store.append(
            [begin("s-0"), own("step.intent", "s-h", 0, ordinal=1, tool="t"), end("s-0")],
            sync=True,
        )
        full = [view.id for view in sagas(store.records()) if view.ended is None]
        assert store.saga_index is not None
        store.saga_index.refresh()
        assert unfinished_at(store.saga_index, 3) == ["s-h"]
    assert full == ["s-h"]
    assert cli(tmp_path, "checkpoint").exit_code == 0
    assert latest(tmp_path).extensions == (extension_line(["s-h"]),)
    assert unfinished_ids(tmp_path) == ["s-h"]
    hide(tmp_path, "s-h")
    assert unfinished_ids(tmp_path) == ["s-h"]


def test_the_count_reads_saga_ids_and_kinds_that_need_escapes(tmp_path: Path) -> None:
    odd = 'q"\\é\n'
    with FileLogStore(tmp_path) as store:
        store.append([begin(odd), begin("s-1"), end("s-1")], sync=True)
        store.append([Entry('k"\\', "s-2", {}, 0)], sync=True)
    assert cli(tmp_path, "checkpoint").exit_code == 0
    assert latest(tmp_path).extensions == (extension_line([odd, "s-2"]),)
