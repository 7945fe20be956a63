"""The signed statement of the unfinished sagas: each checkpoint commits to them, and a reader
that takes them from the saga index believes the index only as far as that statement and the
log after it agree with it. An index edited to hide a whole unfinished saga, begun before or
after the latest statement, is caught; checkpoints written before the statement existed (or
forged) leave readers reading the whole log, never trusting the index."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from agent_saga import CorruptLogError, Entry, FileLogStore
from agent_saga._history.sagareads import unfinished_sagas
from agent_saga._kit.stores import trust_checkpoints
from agent_saga._log.indexsets import unfinished_through
from agent_saga._log.records import IN_SAGA
from agent_saga._log.sagaindex import INDEX_DIR, INDEX_NAME
from agent_saga._log.unfinishedset import Statement, commitment, extension_line, statement_of
from agent_saga.proofs._checkpoint import Checkpoint
from agent_saga.proofs._checkpoints import Checkpointer, CheckpointLog
from agent_saga.proofs._signing import home_signer, home_verifier


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
