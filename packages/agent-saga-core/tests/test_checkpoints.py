"""Signed notes and checkpoints: the C2SP formats, the extension rule, and the checkpointer."""

from __future__ import annotations

import base64
import os
import threading
import time
from pathlib import Path

import pytest
from agent_saga import AgentKit, SequentialIds, tool
from agent_saga.proofs._checkpoint import (
    Checkpoint,
    CheckpointError,
    ForkError,
    check_extension,
    open_checkpoint,
    parse_checkpoint,
)
from agent_saga.proofs._checkpoints import CheckpointLog
from agent_saga.proofs._logtree import tree_of
from agent_saga.proofs._merkle import EMPTY_ROOT, leaf_hash
from agent_saga.proofs._note import NoteError, NoteSigner, NoteVerifier, open_note, sign_note
from agent_saga.proofs._signing import home_signer, home_verifier
from agent_saga.proofs._tree import MerkleTree
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

# The signed-note specification's worked example (also Go's golang.org/x/mod/sumdb/note tests).
KAT_SKEY = "AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
KAT_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
KAT_TEXT = (
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n"
)
KAT_SIG = (
    "\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfq"
    "dngotpRZb6KE6RyyBwJnAM=\n"
)


def kat_signer() -> NoteSigner:
    seed = base64.b64decode(KAT_SKEY)[1:]
    return NoteSigner("PeterNeumann", Ed25519PrivateKey.from_private_bytes(seed))


def new_signer(name: str = "example.com/log") -> NoteSigner:
    return NoteSigner(name, Ed25519PrivateKey.generate())


def leaves(n: int, salt: bytes = b"") -> MerkleTree:
    return MerkleTree.from_leaf_hashes(leaf_hash(salt + i.to_bytes(4, "big")) for i in range(n))


# -- signed notes ----------------------------------------------------------------------------


def test_signing_the_spec_example_gives_the_spec_signature() -> None:
    signer = kat_signer()
    assert signer.verifier.encode() == KAT_VKEY
    assert sign_note(KAT_TEXT, signer) == KAT_TEXT + "\n" + KAT_SIG
    text, signed = open_note(KAT_TEXT + "\n" + KAT_SIG, [NoteVerifier.parse(KAT_VKEY)])
    assert text == KAT_TEXT
    assert [v.name for v in signed] == ["PeterNeumann"]


def test_signatures_by_unknown_keys_are_ignored_and_a_known_one_suffices() -> None:
    ours, theirs = new_signer("ours.example/log"), new_signer("witness.example")
    note = sign_note("hello\n", ours) + theirs.sign("hello\n")
    text, signed = open_note(note, [ours.verifier])
    assert (text, signed) == ("hello\n", [ours.verifier])
    with pytest.raises(NoteError, match="no signature by a known key"):
        open_note(sign_note("hello\n", theirs), [ours.verifier])


def test_a_bad_signature_by_a_known_key_rejects_the_note() -> None:
    signer = new_signer()
    note = sign_note("size 1\n", signer)
    with pytest.raises(NoteError, match="invalid signature"):
        open_note(note.replace("size 1", "size 2"), [signer.verifier])
    forged = signer.sign("other\n")  # a valid signature over another text
    with pytest.raises(NoteError, match="invalid signature"):
        open_note("size 1\n\n" + forged, [signer.verifier])


@pytest.mark.parametrize(
    "note",
    [
        "no blank line\n",
        "text\n\nnot a signature line\n",
        "text\n\n\u2014 name !!!notbase64\n",
        "text\n\n\u2014 name AAAA\n",
        "text\n\n\u2014 name AAAAAAAAAAAA",
        "text\x07\n\n\u2014 name AAAAAAAAAAAA\n",
    ],
)
def test_malformed_notes_are_refused_with_a_typed_error(note: str) -> None:
    with pytest.raises(NoteError):
        open_note(note, [new_signer().verifier])


def test_verifier_keys_round_trip_and_a_wrong_id_is_refused() -> None:
    verifier = new_signer().verifier
    assert NoteVerifier.parse(verifier.encode()) == verifier
    name, key_id, key = verifier.encode().split("+", 2)
    wrong = f"{name}+{int(key_id, 16) ^ 1:08x}+{key}"
    with pytest.raises(NoteError, match="id does not match"):
        NoteVerifier.parse(wrong)
    with pytest.raises(NoteError):
        NoteVerifier.parse("name+00000000+AAAA")
    with pytest.raises(NoteError, match="invalid key name"):
        NoteSigner("has space", Ed25519PrivateKey.generate())


# -- checkpoint format -------------------------------------------------------------------------


def test_checkpoint_body_is_the_c2sp_layout_and_parses_back() -> None:
    tree = leaves(5)
    checkpoint = Checkpoint("example.com/log", 5, tree.root(), ("ext line",))
    body = checkpoint.body()
    root_b64 = base64.b64encode(tree.root()).decode()
    assert body == f"example.com/log\n5\n{root_b64}\next line\n"
    assert parse_checkpoint(body) == checkpoint


@pytest.mark.parametrize(
    "body",
    [
        "origin\n05\n" + base64.b64encode(EMPTY_ROOT).decode() + "\n",
        "origin\n-1\n" + base64.b64encode(EMPTY_ROOT).decode() + "\n",
        "origin\n1\nnot base64\n",
        "origin\n1\n" + base64.b64encode(b"short").decode() + "\n",
        "origin\n1\n" + base64.b64encode(EMPTY_ROOT).decode().rstrip("=") + "\n",
        "origin\n0\n" + base64.b64encode(bytes(32)).decode() + "\n",
        "origin\n1\n",
        "origin\n1\n" + base64.b64encode(EMPTY_ROOT).decode(),
    ],
)
def test_malformed_checkpoints_are_refused(body: str) -> None:
    with pytest.raises(CheckpointError):
        parse_checkpoint(body)


def test_a_checkpoint_signed_by_another_key_or_for_another_log_is_refused() -> None:
    signer = new_signer()
    signed = Checkpoint(signer.name, 3, leaves(3).root()).sign(signer)
    assert open_checkpoint(signed.note, [signer.verifier]).size == 3
    with pytest.raises(CheckpointError, match="no signature by a known key"):
        open_checkpoint(signed.note, [new_signer().verifier])
    with pytest.raises(CheckpointError, match="is for"):
        open_checkpoint(signed.note, [signer.verifier], origin="elsewhere/log")


# -- the extension rule ----------------------------------------------------------------------


def test_a_newer_checkpoint_is_accepted_only_with_a_valid_consistency_proof() -> None:
    tree = leaves(20)
    older = Checkpoint("log", 7, tree.root(7))
    newer = Checkpoint("log", 20, tree.root(20))
    check_extension(older, newer, tree.consistency_proof(7, 20))
    check_extension(Checkpoint("log", 0, EMPTY_ROOT), newer, [])
    check_extension(newer, newer, [])
    bad = list(tree.consistency_proof(7, 20))
    bad[0] = bytes([bad[0][0] ^ 1]) + bad[0][1:]
    with pytest.raises(ForkError):
        check_extension(older, newer, bad)
    with pytest.raises(ForkError):
        check_extension(older, newer, tree.consistency_proof(6, 20))


def test_a_smaller_size_is_a_truncation_and_the_same_size_with_another_root_a_fork() -> None:
    tree, other = leaves(10), leaves(10, salt=b"x")
    with pytest.raises(CheckpointError, match="truncated") as smaller:
        check_extension(Checkpoint("log", 10, tree.root()), Checkpoint("log", 9, tree.root(9)), [])
    assert not isinstance(smaller.value, ForkError)
    older, forked = Checkpoint("log", 10, tree.root()), Checkpoint("log", 10, other.root())
    with pytest.raises(ForkError, match="two roots") as fork:
        check_extension(older, forked, [])
    assert (fork.value.older, fork.value.newer) == (older, forked)
    with pytest.raises(CheckpointError, match="two logs"):
        check_extension(Checkpoint("a", 1, tree.root(1)), Checkpoint("b", 2, tree.root(2)), [])


def test_publishing_keeps_forks_as_evidence_and_the_latest_in_place(home: Path) -> None:
    signer = new_signer()
    log = CheckpointLog(home)
    first = log.publish(leaves(8), signer)
    assert log.latest([signer.verifier]) == first
    assert log.publish(leaves(5), signer) == first  # a stale view publishes nothing
    grown = log.publish(leaves(12), signer)
    assert grown.size == 12
    with pytest.raises(ForkError):
        log.publish(leaves(15, salt=b"rewritten"), signer)
    with pytest.raises(ForkError):
        log.publish(leaves(12, salt=b"rewritten"), signer)
    assert log.latest([signer.verifier]) == grown
    evidence = sorted(p.name for p in (home / "checkpoints" / "forks").iterdir())
    assert len(evidence) == 4
    assert sum("refused" in name for name in evidence) == 2
    for path in (home / "checkpoints" / "forks").iterdir():
        assert open_checkpoint(path.read_text(), [signer.verifier]).size in (12, 15)


# -- the home's key and the kit's checkpointer ------------------------------------------------


def test_the_key_is_created_once_private_and_shared_by_every_process(home: Path) -> None:
    home.mkdir()
    signer = home_signer(home)
    private = home / "keys" / "checkpoint.key"
    assert private.stat().st_mode & 0o777 == 0o600
    assert (home / "keys").stat().st_mode & 0o777 == 0o700
    assert b"PRIVATE KEY" in private.read_bytes()
    assert home_signer(home).verifier == signer.verifier == home_verifier(home)
    assert signer.name.startswith("agent-saga.log/")


def test_a_passphrase_encrypts_the_key_and_is_needed_to_load_it(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent_saga import ConfigurationError

    home.mkdir()
    monkeypatch.setenv("AGENT_SAGA_KEY_PASSPHRASE", "correct horse")
    signer = home_signer(home)
    assert b"ENCRYPTED PRIVATE KEY" in (home / "keys" / "checkpoint.key").read_bytes()
    monkeypatch.delenv("AGENT_SAGA_KEY_PASSPHRASE")
    with pytest.raises(ConfigurationError, match="AGENT_SAGA_KEY_PASSPHRASE"):
        home_signer(home)
    monkeypatch.setenv("AGENT_SAGA_KEY_PASSPHRASE", "correct horse")
    assert home_signer(home).verifier == signer.verifier


@tool(semantics="reversible")
def note_down(text: str) -> str:
    return text


def test_the_kit_checkpoints_every_n_records_in_the_background(home: Path) -> None:
    with AgentKit(
        home=home, ids=SequentialIds(), checkpoint_every=5, checkpoint_interval=30
    ) as kit:
        kit.checkpointer.poll = 0.02  # type: ignore[union-attr]
        for i in range(3):
            with kit.transaction("notes"):
                note_down(f"n{i}")
        deadline = time.monotonic() + 10
        latest = CheckpointLog(home)
        while time.monotonic() < deadline:
            verifier = home_verifier(home)
            current = None if verifier is None else latest.latest([verifier])
            if current is not None and current.size >= 5:
                break
            time.sleep(0.02)
        assert current is not None
        assert current.size >= 5
        records = list(kit.store.records())
        assert current.root == tree_of(records[: current.size]).root()


def test_closing_the_kit_checkpoints_the_whole_log(home: Path) -> None:
    with AgentKit(home=home, ids=SequentialIds()) as kit:
        with kit.transaction("notes"):
            note_down("a")
        records = list(kit.store.records())
    verifier = home_verifier(home)
    assert verifier is not None
    latest = CheckpointLog(home).latest([verifier])
    assert latest is not None
    assert latest.size == len(records)
    assert latest.root == tree_of(records).root()


def test_an_explicit_checkpoint_and_the_memory_store_has_none(home: Path) -> None:
    from agent_saga import ConfigurationError

    with AgentKit(home=home, ids=SequentialIds()) as kit:
        with kit.transaction("notes"):
            note_down("a")
        assert kit.checkpoint().size == len(list(kit.store.records()))
    with AgentKit(home=home, store="memory") as memory, pytest.raises(ConfigurationError):
        memory.checkpoint()
    with AgentKit(home=home, checkpoints=False) as off:
        assert off.checkpointer is None


def test_checkpoints_add_no_fsync_to_a_transaction(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every fsync a checkpoint makes happens in the checkpointer's thread or at close."""
    calls: list[str] = []
    real_fsync, real_fdatasync = os.fsync, os.fdatasync

    def counting_fsync(fd: int) -> None:
        calls.append(threading.current_thread().name)
        real_fsync(fd)

    def counting_fdatasync(fd: int) -> None:  # how records are synced on Linux
        calls.append(threading.current_thread().name)
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    monkeypatch.setattr(os, "fdatasync", counting_fdatasync)

    def transaction_fsyncs(checkpoints: bool, where: Path) -> tuple[int, int]:
        """(fsyncs outside the checkpointer's thread, fsyncs inside it) during 20 sagas."""
        with AgentKit(home=where, ids=SequentialIds(), checkpoints=checkpoints) as kit:
            if kit.checkpointer is not None:
                kit.checkpointer.every, kit.checkpointer.poll = 1, 0.001
                kit.checkpoint()  # the key and the first checkpoint exist before we count
            calls.clear()
            for i in range(20):
                with kit.transaction("notes"):
                    note_down(f"n{i}")
            time.sleep(0.1)  # let the checkpointer publish while we look
            background = calls.count("agent-saga-checkpoints")
            return len(calls) - background, background

    on_path, background = transaction_fsyncs(True, home / "on")
    without, _ = transaction_fsyncs(False, home / "off")
    assert background > 0  # checkpoints were published meanwhile...
    assert on_path == without > 0  # ...and cost the transactions no fsync


def test_a_fork_makes_the_kit_not_ready_and_the_manifest_shows_the_policy(home: Path) -> None:
    with AgentKit(home=home, ids=SequentialIds(), checkpoint_every=50) as kit:
        with kit.transaction("notes"):
            note_down("a")
        assert kit.status().checks["checkpoints"] == "ok"
        manifest = kit.guarantees()["checkpoints"]
        assert manifest["every_records"] == 50
        assert manifest["at_close"] is True
        # Someone signs a head for a different log of the same size with this home's key.
        size = len(list(kit.store.records()))
        CheckpointLog(home).publish(leaves(size, salt=b"forged"), home_signer(home))
        with pytest.raises(ForkError):
            kit.checkpoint()
        report = kit.status()
        assert not report.ready
        assert report.checks["checkpoints"].startswith("FORK")
        assert any("no longer extends its checkpoint" in reason for reason in report.reasons)
    with AgentKit(home=home, store="memory") as memory:
        assert memory.guarantees()["checkpoints"] is None


def test_a_kit_on_a_simulated_disk_writes_no_checkpoint_to_the_real_one(tmp_path: Path) -> None:
    from agent_saga import FileLogStore
    from agent_saga.testing import SimFileSystem

    fs = SimFileSystem()
    store = FileLogStore(tmp_path / "virtual", fs=fs)
    with AgentKit(home=tmp_path / "virtual", store=store) as kit:
        assert kit.checkpointer is None
    assert not (tmp_path / "virtual").exists()


def test_an_abandoned_kit_stops_its_checkpoint_thread(home: Path) -> None:
    import gc

    kit = AgentKit(home=home)
    assert kit.checkpointer is not None
    thread = kit.checkpointer._thread
    assert thread is not None
    assert thread.is_alive()
    kit.checkpointer.poll = 0.01
    kit.store.close()
    del kit
    gc.collect()
    thread.join(timeout=5)
    assert not thread.is_alive()


def test_the_kit_checkpoints_after_the_interval_when_the_log_grew(home: Path) -> None:
    with AgentKit(
        home=home, ids=SequentialIds(), checkpoint_every=1000, checkpoint_interval=0.2
    ) as kit:
        with kit.transaction("notes"):
            note_down("a")
        size = len(list(kit.store.records()))
        log = CheckpointLog(home)
        deadline = time.monotonic() + 10
        current = None
        while time.monotonic() < deadline:
            verifier = home_verifier(home)
            current = None if verifier is None else log.latest([verifier])
            if current is not None:
                break
            time.sleep(0.02)
        assert current is not None  # far fewer than 1,000 records: published for the interval
        assert current.size == size


def test_concurrent_publishers_of_one_log_never_fork_and_keep_the_largest(home: Path) -> None:
    signer = new_signer()
    errors: list[BaseException] = []

    def publisher(sizes: range) -> None:
        try:
            for size in sizes:  # each its own file handles, as separate processes would have
                CheckpointLog(home).publish(leaves(size), signer)
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=publisher, args=(range(1, 60, k),)) for k in (1, 2, 3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    latest = CheckpointLog(home).latest([signer.verifier])
    assert latest is not None
    assert latest.size == 59
    assert not (home / "checkpoints" / "forks").exists()


def test_closing_a_kit_whose_store_failed_still_closes_the_store(home: Path) -> None:
    from agent_saga import MemoryLogStore, StoreFailedError

    class FailedStore(MemoryLogStore):
        kind = "failed-on-sync"
        closed = False

        def sync(self) -> None:
            raise StoreFailedError("the server went away")

        def close(self) -> None:
            self.closed = True

    store = FailedStore()
    kit = AgentKit(home=home, store=store)
    assert kit.checkpointer is not None
    kit.close()  # no last checkpoint for a failed store, and no error from it
    assert store.closed
    assert kit.checkpointer._thread is not None
    assert not kit.checkpointer._thread.is_alive()


def test_a_checkpoint_published_while_the_log_is_read_is_no_truncation(home: Path) -> None:
    """verify, certify and prove read the latest checkpoint before the log: an agent that
    appends and publishes meanwhile cannot make a live log look cut."""
    from agent_saga.proofs._audit import home_verifiers, latest_problem, snapshot

    with AgentKit(home=home, checkpoint_every=10_000, checkpoint_interval=3600) as kit:

        @kit.tool(name="cp.note", semantics="reversible")
        def note(n: int) -> int:
            return n

        with kit.transaction("first"):
            note(1)
        kit.checkpoint()
        log = snapshot(home, keep_records=False, home=home)
        with kit.transaction("second"):  # the agent goes on and publishes a newer checkpoint
            note(2)
        assert kit.checkpoint().size > log.size
        latest, finding = latest_problem(home, log, home_verifiers(home, None))
    assert finding is None, finding
    assert latest is not None
    assert latest.size == log.size
