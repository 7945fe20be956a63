"""Attacks on the signed statement of the unfinished sagas by someone who can write the saga
index and the checkpoints folder but not the home's checkpoint key: a checkpoint of another home,
an older checkpoint of this home put back as the latest, a statement beyond the log, and a
checkpoint key replaced (rotated after a leak) while a process has the old statement in hand.
Each time the hidden saga is still reported to recovery."""

from __future__ import annotations

from pathlib import Path

from agent_saga import FileLogStore
from agent_saga._log.unfinishedset import extension_line
from agent_saga.proofs._checkpoint import Checkpoint
from agent_saga.proofs._checkpoints import Checkpointer, CheckpointLog
from agent_saga.proofs._notefiles import KEYS_DIR
from agent_saga.proofs._signing import home_signer
from test_saga_index_statement import begin, hide, latest, unfinished_ids


def _signed_statement(home: Path, size: int, root: bytes, unfinished: list[str]) -> str:
    """A checkpoint note of ``size`` stating ``unfinished``, signed with ``home``'s key."""
    signer = home_signer(home)
    return Checkpoint(signer.name, size, root, (extension_line(unfinished),)).sign(signer).note


def _indexed(store: FileLogStore) -> None:
    assert store.saga_index is not None
    store.saga_index.refresh()


def _s2_hidden(home: Path) -> bytes:
    """``s-1`` and ``s-2`` begun and signed for by a checkpoint, then ``s-2`` hidden from the
    index; the checkpoint's root."""
    with FileLogStore(home) as store:
        store.append([begin("s-1"), begin("s-2")], sync=True)
        Checkpointer(home, store).checkpoint()
        _indexed(store)
    hide(home, "s-2")
    return latest(home).root


def test_a_checkpoint_of_another_home_is_not_believed(tmp_path: Path) -> None:
    home, other = tmp_path / "home", tmp_path / "other"
    root = _s2_hidden(home)
    note = CheckpointLog(home).latest_path
    note.write_text(_signed_statement(other, 2, root, ["s-1"]))  # true for the edited index
    assert unfinished_ids(home) == ["s-1", "s-2"]


def test_an_older_checkpoint_put_back_as_the_latest_still_catches_the_hidden_saga(
    tmp_path: Path,
) -> None:
    with FileLogStore(tmp_path) as store:
        store.append([begin("s-1")], sync=True)
        Checkpointer(tmp_path, store).checkpoint()
        older = CheckpointLog(tmp_path).latest_path.read_text()
        store.append([begin("s-2"), begin("s-3")], sync=True)
        Checkpointer(tmp_path, store).checkpoint()
        _indexed(store)
    hide(tmp_path, "s-3")
    CheckpointLog(tmp_path).latest_path.write_text(older)
    assert unfinished_ids(tmp_path) == ["s-1", "s-2", "s-3"]


def test_a_statement_beyond_the_log_is_not_used(tmp_path: Path) -> None:
    """A checkpoint whose size is past the log's end (a log restored from an older copy, or a
    note from a longer log) states nothing about this log: the whole log is walked."""
    root = _s2_hidden(tmp_path)
    beyond = _signed_statement(tmp_path, 10**18, root, ["s-1"])
    CheckpointLog(tmp_path).latest_path.write_text(beyond)
    assert unfinished_ids(tmp_path) == ["s-1", "s-2"]


def test_a_statement_signed_with_a_key_replaced_since_is_not_believed_any_more(
    tmp_path: Path,
) -> None:
    """The checkpoint key leaked and was replaced; a running process that had read (and
    believed) a statement the old key signed must check the note against the key now in the
    home, not against the one it verified it with before."""
    root = _s2_hidden(tmp_path)
    forged = _signed_statement(tmp_path, 2, root, ["s-1"])  # made with the leaked key
    CheckpointLog(tmp_path).latest_path.write_text(forged)
    from agent_saga._history.sagareads import unfinished_sagas
    from agent_saga._kit.stores import trust_checkpoints

    with FileLogStore(tmp_path) as store:
        trust_checkpoints(store, tmp_path)
        assert [v.id for v in unfinished_sagas(store)] == ["s-1"]  # the old key was trusted
        for old in (tmp_path / KEYS_DIR).iterdir():
            old.unlink()
        home_signer(tmp_path)  # the replacement key
        assert [v.id for v in unfinished_sagas(store)] == ["s-1", "s-2"]
