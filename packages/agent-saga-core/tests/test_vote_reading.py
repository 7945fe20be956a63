"""A vote reads what was appended since the process's last vote, never the whole log again; a log
that no longer continues what was read is read again in full."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_saga import (
    IRREVERSIBLE,
    REVERSIBLE,
    AgentKit,
    FileLogStore,
    MemoryLogStore,
    SequentialIds,
)
from agent_saga._approvals.request import ApprovalBook, ApprovalRequest
from agent_saga._approvals.votes import submit_vote
from agent_saga._approvals.wait import Approvals
from agent_saga._log.records import Record


def pending_request(kit: AgentKit, timeout: float = 10.0) -> ApprovalRequest:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = list(ApprovalBook().take_all(kit.store.records()).requests.values())
        if found:
            return found[-1]
        time.sleep(0.01)
    raise AssertionError("no approval request was logged")


def waiting_wire(kit: AgentKit) -> tuple[threading.Thread, list[int]]:
    """An agent thread whose IRREVERSIBLE wire waits for an approval; ``ran`` fills if it runs."""
    ran: list[int] = []

    @kit.tool(name="bank.wire", semantics=IRREVERSIBLE)
    def wire(usd: int) -> int:
        ran.append(usd)
        return usd

    def agent() -> None:
        with kit.transaction("pay"):
            wire(900)

    thread = threading.Thread(target=agent)
    thread.start()
    return thread, ran


def test_a_vote_on_the_file_store_does_not_read_the_whole_log_again(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    approvals = Approvals(approvers=["alice"], poll=0.01)
    with AgentKit(home=home, ids=SequentialIds(), approvals=approvals) as kit:
        thread, ran = waiting_wire(kit)
        request = pending_request(kit)
        refused = submit_vote(kit.store, request.id, "mallory", "approve", channel="test")
        assert not refused.accepted  # the first vote of this process read the log

        full_reads: list[int] = []
        records = kit.store.records

        def counted() -> Iterator[object]:
            full_reads.append(1)
            return records()

        with monkeypatch.context() as patch:
            patch.setattr(kit.store, "records", counted)
            accepted = submit_vote(kit.store, request.id, "alice", "approve", channel="test")
        assert accepted.accepted, accepted.message
        assert full_reads == []
        thread.join(timeout=30)
    assert ran == [900]


def test_a_log_that_no_longer_continues_what_was_read_is_read_again() -> None:
    store = MemoryLogStore()
    approvals = Approvals(approvers=["alice"], poll=0.01)
    with AgentKit(store=store, ids=SequentialIds(), approvals=approvals) as kit:
        thread, ran = waiting_wire(kit)
        request = pending_request(kit)
        assert not submit_vote(store, request.id, "mallory", "approve", channel="test").accepted
        # The record the last vote read last is replaced: what was read is no longer the log.
        stored = list(store.records())
        last = stored[-1]
        store.tamper(len(stored) - 1, last._replace(hash="0" * 64))
        retried = submit_vote(store, request.id, "mallory", "approve", channel="test")
        assert not retried.accepted
        assert "may not approve" in retried.message  # the request was found again
        store.tamper(len(stored) - 1, last)
        assert submit_vote(store, request.id, "alice", "approve", channel="test").accepted
        thread.join(timeout=30)
    assert ran == [900]


def test_a_child_forked_while_a_vote_was_being_written_can_vote() -> None:
    """The votes' lock is this process's: a child forked while another thread held it does not
    inherit it held (it would wait forever for a thread that does not exist in the child)."""
    from agent_saga._approvals.votes import _BOOKS

    store = MemoryLogStore()
    with _BOOKS.lock:  # as a thread writing a vote at the moment of the fork
        pid = os.fork()
        if pid == 0:  # the child: one vote, then out without running the parent's cleanup
            result = submit_vote(store, "apr-none", "bob", "approve", channel="child")
            os._exit(0 if not result.accepted else 1)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError("the forked child never got to write its vote")


def test_the_waiting_engine_reads_only_the_records_after_its_request(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its votes are read from the log's new records; the keys registered before the request
    come from the process's shared book (which read the log once, for the process's first
    vote), so a long log is not read again per approval."""
    approvals = Approvals(approvers=["alice"], poll=0.01)
    with AgentKit(home=home, ids=SequentialIds(), approvals=approvals) as kit:

        @kit.tool(name="notes.add", semantics=REVERSIBLE)
        def add(n: int) -> int:
            return n

        for n in range(40):
            with kit.transaction("warm"):
                add(n)
        before = sum(1 for _ in kit.store.records())
        assert not submit_vote(kit.store, "apr-none", "alice", "approve", channel="t").accepted
        follows: list[int] = []
        assert isinstance(kit.store, FileLogStore)
        follow = kit.store.follow

        def followed(start: int, seq: int, prev: str) -> Iterator[tuple[int, Record]]:
            follows.append(seq)
            return follow(start, seq, prev)

        with monkeypatch.context() as patch:
            patch.setattr(kit.store, "follow", followed)
            thread, ran = waiting_wire(kit)
            request = pending_request(kit)
            deadline = time.monotonic() + 10
            while len(follows) < 2 and time.monotonic() < deadline:  # the wait has begun
                time.sleep(0.005)
            assert submit_vote(kit.store, request.id, "alice", "approve", channel="t").accepted
            thread.join(timeout=30)
    assert ran == [900]
    assert follows
    assert min(follows) >= before, follows  # never from the log's first record


def test_a_request_whose_vote_is_already_read_is_waited_for_from_the_first_record(
    home: Path,
) -> None:
    """The shared book's keys may be newer than a vote it has read: such a wait reads the log
    from its start, checking each vote with the keys registered before it."""
    from agent_saga._approvals.votes import _BOOKS

    approvals = Approvals(approvers=["alice"], poll=0.01)
    with AgentKit(home=home, ids=SequentialIds(), approvals=approvals) as kit:
        thread, ran = waiting_wire(kit)
        request = pending_request(kit)
        assert _BOOKS.seed(kit.store, request.id) is not None  # no vote yet
        assert submit_vote(kit.store, request.id, "alice", "approve", channel="test").accepted
        assert _BOOKS.seed(kit.store, request.id) is None
        thread.join(timeout=30)
    assert ran == [900]


def test_keys_an_administrator_no_longer_trusted_registered_do_not_count_after_the_change(
    tmp_path: Path,
) -> None:
    """The shared book judged a key record with the administrators trusted then; once the
    configuration trusts others, the book (and every wait seeded from it) judges it again."""
    import base64
    import secrets

    from agent_saga import Entry
    from agent_saga._approvals.keys import KeyGrant, key_message
    from agent_saga._approvals.votes import _BOOKS
    from agent_saga._log.admins import admin_id, trusting_admins
    from agent_saga._log.records import Kind
    from agent_saga.proofs._note import NoteVerifier
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    with FileLogStore(tmp_path / "home") as store:
        store.append([Entry("saga.begin", "s0", {}, 0)], sync=True)
        first = next(iter(store.records())).hash
        admin_a, admin_b = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
        raw_a = admin_a.public_key().public_bytes_raw()
        alice = Ed25519PrivateKey.generate().public_key().public_bytes_raw()
        key_text = NoteVerifier("approver/alice", alice).encode()
        nonce = secrets.token_hex(8)
        signed = admin_a.sign(key_message("add", "alice", key_text, nonce, first))
        grant = KeyGrant("admin", admin_id(raw_a), nonce, base64.b64encode(signed).decode())
        data = {"approver": "alice", "key": key_text, **grant.to_data()}
        store.append([Entry(Kind.KEY_ADDED, None, data, 0)], sync=True)
        with trusting_admins([raw_a]), _BOOKS.lock:
            assert len(_BOOKS.current(store).keys.active("alice")) == 1
        with trusting_admins([admin_b.public_key().public_bytes_raw()]):
            store.append([Entry("approval.requested", "s1", {"x": 1}, 0)], sync=True)
            seeded = _BOOKS.seed(store, "apr-x")
            assert seeded is not None
            assert len(seeded[0].keys.active("alice")) == 0
