"""Attacks on passkey votes: evidence of the wrong shape or size given to ``submit_vote``, a
passkey vote record written without its nonce, and a vote logged before its key's registration.
Each is what a caller or a writer of the log could do; the engine, ``submit_vote`` and certify
must agree on it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from agent_saga import AgentKit, Entry, SequentialIds, register_passkey, submit_vote
from agent_saga._approvals.request import (
    REQUESTED,
    VOTE,
    ApprovalBook,
    ApprovalRequest,
    check_vote,
)
from agent_saga.proofs._passkey_audit import audit_passkeys
from passkey_kit import SoftPasskey


def log_request(kit: AgentKit) -> ApprovalRequest:
    """A pending request of alice's on step 2 of saga ``s-1``, logged as the engine logs it."""
    now = time.time()
    request = ApprovalRequest(
        "apr-00000000000000aa", "s-1", 2, "passkey.wire", "irreversible", "ab" * 32, {}, "r",
        "why", ("alice",), 1, now, now + 600,
    )  # fmt: skip
    kit.store.append([Entry(REQUESTED, "s-1", request.to_data(), int(now * 1000))], sync=True)
    return request


def logged_votes(kit: AgentKit) -> list[dict[str, Any]]:
    return [dict(r.data) for r in kit.store.records() if r.kind == VOTE]


def test_submit_vote_logs_only_the_passkey_fields_it_checks(tmp_path: Path) -> None:
    alice = SoftPasskey("alice")
    with AgentKit(home=tmp_path / "home", ids=SequentialIds()) as kit:
        assert register_passkey(kit.store, alice.key(), by="test").written
        request = log_request(kit)
        evidence = alice.vote(request, "approve")
        evidence["padding"] = "x" * 200_000
        evidence["challenge"]["padding"] = "y" * 200_000
        voted = submit_vote(
            kit.store, request.id, "alice", "approve", channel="t", passkey=evidence
        )
        assert voted.accepted, voted.message
        (vote,) = logged_votes(kit)
    assert "padding" not in vote["passkey"]
    assert "padding" not in vote["passkey"]["challenge"]
    assert len(str(vote)) < 10_000


@pytest.mark.parametrize("evidence", ["not a mapping", ["a", "b"], 7])
def test_submit_vote_refuses_passkey_evidence_that_is_not_a_mapping(
    tmp_path: Path, evidence: Any
) -> None:
    with AgentKit(home=tmp_path / "home", ids=SequentialIds()) as kit:
        request = log_request(kit)
        voted = submit_vote(
            kit.store, request.id, "alice", "approve", channel="t", passkey=evidence
        )
        assert logged_votes(kit) == []
    assert not voted.accepted
    assert voted.message == "a malformed passkey assertion"


def test_a_passkey_vote_logged_without_its_nonce_counts_nowhere(tmp_path: Path) -> None:
    alice = SoftPasskey("alice")
    with AgentKit(home=tmp_path / "home", ids=SequentialIds()) as kit:
        assert register_passkey(kit.store, alice.key(), by="test").written
        request = log_request(kit)
        data: dict[str, Any] = {
            "request": request.id, "saga": request.saga, "by": "alice", "decision": "approve",
            "channel": "written-around", "note": "", "at": time.time(),
            "passkey": alice.vote(request, "approve"),
        }  # fmt: skip
        kit.store.append([Entry(VOTE, None, data, int(time.time() * 1000))], sync=True)
        records = list(kit.store.records())
    book = ApprovalBook().take_all(records)
    (vote,) = book.votes[request.id]
    audit = audit_passkeys(records)
    assert [why for _, why in audit.problems] == [
        "passkey vote (record 3) by alice: the vote has no nonce"
    ]
    assert check_vote(vote, request, book.keys, request.digest) == "the passkey vote has no nonce"


def test_the_engine_checks_a_vote_with_the_keys_registered_before_it_as_certify_does(
    tmp_path: Path,
) -> None:
    """A vote logged before its passkey is registered is unknown where it stands in the log:
    certify says so, and the waiting engine, reading both records in one look, must too."""
    from agent_saga._approvals.wait import Approvals, Waiter
    from agent_saga._clock import SystemClock

    alice = SoftPasskey("alice")
    with AgentKit(home=tmp_path / "home", ids=SequentialIds()) as kit:
        request = log_request(kit)
        evidence = alice.vote(request, "approve")
        data: dict[str, Any] = {
            "request": request.id, "saga": request.saga, "by": "alice", "decision": "approve",
            "channel": "written-around", "note": "", "at": time.time(),
            "nonce": evidence["challenge"]["nonce"], "passkey": evidence,
        }  # fmt: skip
        kit.store.append([Entry(VOTE, None, data, int(time.time() * 1000))], sync=True)
        assert register_passkey(kit.store, alice.key(), by="late").written
        waiter = Waiter(
            Approvals(approvers=["alice"], require_passkey=True), kit.store, SystemClock(), request
        )
        outcome = waiter.look(request.digest)
        records = list(kit.store.records())
    audit = audit_passkeys(records)
    assert [why for _, why in audit.problems] == [
        "passkey vote (record 2) by alice: the passkey is not registered in this log"
    ]
    assert outcome is None
    assert waiter.ignored == ["alice: the passkey is not registered in this log"]


def test_the_same_registration_logged_twice_is_no_problem_for_certify(tmp_path: Path) -> None:
    """Two agent processes sharing a home can both register an approver's passkey the first
    time it votes (``register_passkey`` checks under a lock of its process only): the repeat
    of the same key changes nothing, unlike another key under the credential id."""
    alice = SoftPasskey("alice")
    with AgentKit(home=tmp_path / "home", ids=SequentialIds()) as kit:
        data = {**alice.key().to_data(), "by": "process", "at": time.time()}
        for _ in range(2):
            kit.store.append([Entry("passkey.registered", None, data, 0)], sync=True)
        records = list(kit.store.records())
    assert audit_passkeys(records).problems == []
    assert ApprovalBook().take_all(records).keys.passkeys.find(alice.credential) is not None


def test_certify_says_what_verified_passkey_votes_rest_on(tmp_path: Path) -> None:
    """The documented limit (whoever can write the log can register a passkey for any
    approver) is in the certificate that counts the verified passkey votes."""
    import json

    from agent_saga.cli import main
    from click.testing import CliRunner

    alice = SoftPasskey("alice")
    home = tmp_path / "home"
    with AgentKit(home=home, ids=SequentialIds()) as kit:
        assert register_passkey(kit.store, alice.key(), by="test").written
        request = log_request(kit)
        evidence = alice.vote(request, "approve")
        voted = submit_vote(
            kit.store, request.id, "alice", "approve", channel="t", passkey=evidence
        )
        assert voted.accepted, voted.message
    out = tmp_path / "cert.json"
    result = CliRunner().invoke(main, ["--home", str(home), "certify", "--out", str(out)])
    cert = json.loads(out.read_text())
    assert cert["counts"]["passkey_votes"] == 1, result.output
    assert "register a passkey for any approver" in json.dumps(cert)


def test_one_passkey_vote_sent_by_eight_threads_at_once_is_logged_once(tmp_path: Path) -> None:
    import threading

    alice = SoftPasskey("alice")
    with AgentKit(home=tmp_path / "home", ids=SequentialIds()) as kit:
        assert register_passkey(kit.store, alice.key(), by="test").written
        request = log_request(kit)
        evidence = alice.vote(request, "approve")
        results: list[Any] = []
        start = threading.Barrier(8)

        def send() -> None:
            start.wait()
            results.append(
                submit_vote(
                    kit.store, request.id, "alice", "approve", channel="t", passkey=evidence
                )
            )

        threads = [threading.Thread(target=send) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        votes = logged_votes(kit)
    assert sum(1 for r in results if r.accepted) == 1
    assert len(votes) == 1
    assert {r.message for r in results if not r.accepted} == {
        "alice has already voted on this request"
    }
