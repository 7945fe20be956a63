"""Passkey votes: the engine checks the WebAuthn assertion against the arguments about to run
before counting it, ``require_passkey`` counts nothing else, and certify re-checks every passkey
vote offline with the registered key. Assertions are real (ES256 and Ed25519, made with
``cryptography`` by :mod:`passkey_kit`) and verified by py_webauthn."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from agent_saga import (
    AgentKit,
    ConfigurationError,
    Entry,
    SequentialIds,
    register_passkey,
    revoke_passkey,
    submit_vote,
    tool,
)
from agent_saga._approvals.request import ApprovalBook, ApprovalRequest, check_vote
from agent_saga._approvals.wait import Approvals
from agent_saga.cli import main
from click.testing import CliRunner
from passkey_kit import SoftPasskey

WIRES: list[int] = []


@tool(name="passkey.wire")
def wire(usd: int) -> str:
    WIRES.append(usd)
    return f"wire-{usd}"


def requests_of(kit: AgentKit) -> list[ApprovalRequest]:
    return list(ApprovalBook().take_all(kit.store.records()).requests.values())


def wait_for_request(kit: AgentKit, timeout: float = 20.0) -> ApprovalRequest:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = requests_of(kit)
        if found:
            return found[-1]
        time.sleep(0.01)
    raise AssertionError("no approval request was logged")


def run(body: Any) -> tuple[threading.Thread, dict[str, Any]]:
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["result"] = body()
        except BaseException as exc:  # the test inspects it
            outcome["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    return thread, outcome


def certify(home: Path) -> Any:
    return CliRunner().invoke(main, ["--home", str(home), "certify", "--out", str(home / "c")])


def decided(kit: AgentKit) -> dict[str, Any]:
    found = [r.data for r in kit.store.records() if r.kind == "approval.decided"]
    assert len(found) == 1
    return found[0]


@pytest.mark.parametrize("alg", ["ES256", "Ed25519"])
def test_a_passkey_vote_approves_an_irreversible_step_once(home: Path, alg: str) -> None:
    WIRES.clear()
    passkey = SoftPasskey("alice", alg)
    approvals = Approvals(approvers=["alice"], require_passkey=True, poll=0.01)
    with AgentKit(home=home, ids=SequentialIds(), approvals=approvals) as kit:
        assert register_passkey(kit.store, passkey.key(), by="test").written

        def agent() -> str:
            with kit.transaction("pay"):
                return wire(900)

        thread, outcome = run(agent)
        request = wait_for_request(kit)
        assert WIRES == []
        voted = submit_vote(
            kit.store, request.id, "alice", "approve", channel="ui-passkey",
            passkey=passkey.vote(request, "approve"),
        )  # fmt: skip
        assert voted.accepted, voted.message
        thread.join(30)
        assert outcome == {"result": "wire-900"}
        assert decided(kit)["by"] == ["alice"]
    assert WIRES == [900]
    result = certify(home)
    assert result.exit_code == 0, result.output
    assert "1 passkey votes verified" in result.output
    assert json.loads((home / "c").read_text())["counts"]["passkey_votes"] == 1


def test_require_passkey_ignores_token_votes_and_logs_why(home: Path) -> None:
    WIRES.clear()
    passkey = SoftPasskey("bob", "Ed25519")
    approvals = Approvals(approvers=["alice", "bob"], require_passkey=True, poll=0.01)
    with AgentKit(home=home, ids=SequentialIds(), approvals=approvals) as kit:
        register_passkey(kit.store, passkey.key(), by="test")

        def agent() -> str:
            with kit.transaction("pay"):
                return wire(5)

        thread, outcome = run(agent)
        request = wait_for_request(kit)
        assert submit_vote(kit.store, request.id, "alice", "approve", channel="token").accepted
        time.sleep(0.3)
        assert thread.is_alive()  # the token vote did not count
        assert WIRES == []
        submit_vote(
            kit.store, request.id, "bob", "approve", channel="ui-passkey",
            passkey=passkey.vote(request, "approve"),
        )  # fmt: skip
        thread.join(30)
        assert outcome == {"result": "wire-5"}
        found = decided(kit)
    assert found["by"] == ["bob"]
    assert found["ignored"] == ["alice: a vote without a passkey, but passkeys are required"]
    assert WIRES == [5]


def test_a_passkey_denial_refuses_the_step(home: Path) -> None:
    WIRES.clear()
    passkey = SoftPasskey("alice")
    approvals = Approvals(approvers=["alice"], require_passkey=True, poll=0.01)
    with AgentKit(home=home, ids=SequentialIds(), approvals=approvals) as kit:
        register_passkey(kit.store, passkey.key(), by="test")

        def agent() -> str:
            with kit.transaction("pay"):
                return wire(7)

        thread, outcome = run(agent)
        request = wait_for_request(kit)
        evidence = passkey.vote(request, "deny")
        assert submit_vote(
            kit.store, request.id, "alice", "deny", channel="p", passkey=evidence
        ).accepted
        thread.join(30)
        assert "denied" in str(outcome["error"])
        assert decided(kit)["denied_by"] == ["alice"]
    assert WIRES == []
    assert certify(home).exit_code == 0


def book_with(passkey: SoftPasskey, *others: SoftPasskey) -> tuple[ApprovalBook, ApprovalRequest]:
    """A log with the passkeys registered and one request of alice's and bob's."""
    with AgentKit(home=None, ids=SequentialIds()) as kit:
        for each in (passkey, *others):
            register_passkey(kit.store, each.key(), by="test")
        book = ApprovalBook().take_all(kit.store.records())
    request = ApprovalRequest(
        "apr-0123456789abcdef", "saga-1", 3, "passkey.wire", "irreversible", "ab" * 32, {}, "r",
        "why", ("alice", "bob"), 1, time.time(), time.time() + 600,
    )  # fmt: skip
    return book, request


def vote_of(approver: str, decision: str, evidence: dict[str, Any], book: ApprovalBook) -> Any:
    from agent_saga import Kind, Record

    data = {
        "request": "apr-0123456789abcdef", "by": approver, "decision": decision,
        "at": time.time(), "nonce": evidence["challenge"]["nonce"], "passkey": evidence,
    }  # fmt: skip
    book.take(Record(seq=99, ts=0, kind=Kind.APPROVAL_VOTE, saga=None, data=data, hash="", prev=""))
    return book.votes["apr-0123456789abcdef"][-1]


@pytest.mark.parametrize("alg", ["ES256", "Ed25519"])
def test_each_way_a_passkey_vote_can_be_wrong_is_refused_with_its_reason(alg: str) -> None:
    alice, bob = SoftPasskey("alice", alg), SoftPasskey("bob", alg)
    book, request = book_with(alice, bob)
    digest = request.digest

    def problem(evidence: dict[str, Any], decision: str = "approve", who: str = "alice") -> Any:
        return check_vote(vote_of(who, decision, evidence, book), request, book.keys, digest)

    assert problem(alice.vote(request, "approve")) is None
    assert problem(alice.vote(request, "approve", digest="cd" * 32)) == (
        "the passkey signed another action digest (other arguments)"
    )
    assert problem(alice.vote(request, "approve", step=4)) == "the passkey signed another step"
    assert problem(alice.vote(request, "deny")) == "the passkey signed the other decision"
    assert problem(alice.vote(request, "approve"), who="bob") == "the passkey is alice's, not bob's"
    replayed = alice.vote(request, "approve")
    assert problem(replayed) is None
    assert problem(replayed) == "replayed: its nonce was used by an earlier vote"
    forged = alice.vote(request, "approve")
    forged["signature"] = bob.vote(request, "approve")["signature"]
    assert "does not verify" in str(problem(forged))
    unverified = alice.vote(request, "approve", flags=0x01)
    assert "User verification is required" in str(problem(unverified))
    elsewhere = alice.vote(request, "approve", origin="http://evil.example")
    assert "Unexpected client data origin" in str(problem(elsewhere))
    stranger = SoftPasskey("alice", alg)
    assert problem(stranger.vote(request, "approve")) == (
        "the passkey is not registered in this log"
    )


def test_a_revoked_passkey_no_longer_counts(home: Path) -> None:
    alice = SoftPasskey("alice", "Ed25519")
    with AgentKit(home=home, ids=SequentialIds()) as kit:
        register_passkey(kit.store, alice.key(), by="test")
        again = register_passkey(kit.store, alice.key(), by="test")
        assert (again.written, again.problem) == (False, None)  # the same key: nothing written
        assert revoke_passkey(kit.store, alice.credential, by="admin", reason="lost laptop")
        assert not revoke_passkey(kit.store, alice.credential, by="admin")
        records = list(kit.store.records())
        book = ApprovalBook().take_all(records)
    revoked = next(r.seq for r in records if r.kind == "passkey.revoked")
    _, request = book_with(SoftPasskey("x"))
    vote = vote_of("alice", "approve", alice.vote(request, "approve"), book)
    assert check_vote(vote, request, book.keys, request.digest) == (
        f"the passkey was revoked (record {revoked})"
    )


def test_a_key_swapped_under_a_credential_is_refused(home: Path) -> None:
    alice = SoftPasskey("alice")
    other = SoftPasskey("alice")
    other.credential = alice.credential
    with AgentKit(home=home, ids=SequentialIds()) as kit:
        assert register_passkey(kit.store, alice.key(), by="test").written
        swapped = register_passkey(kit.store, other.key(), by="test")
        assert (swapped.written, swapped.problem) == (False, "another key has this credential")
        broken = alice.key()
        bad = register_passkey(kit.store, type(broken)(**{**broken.__dict__, "alg": -8}), by="t")
        assert bad.problem == "the passkey's public key is of algorithm -7, not -8"


def signed_log(home: Path) -> tuple[SoftPasskey, ApprovalRequest]:
    """A log whose one IRREVERSIBLE step was approved by alice's passkey vote."""
    WIRES.clear()
    passkey = SoftPasskey("alice")
    approvals = Approvals(approvers=["alice"], require_passkey=True, poll=0.01)
    with AgentKit(home=home, ids=SequentialIds(), approvals=approvals) as kit:
        register_passkey(kit.store, passkey.key(), by="test")

        def agent() -> str:
            with kit.transaction("pay"):
                return wire(31)

        thread, outcome = run(agent)
        request = wait_for_request(kit)
        submit_vote(
            kit.store, request.id, "alice", "approve", channel="p",
            passkey=passkey.vote(request, "approve"),
        )  # fmt: skip
        thread.join(30)
        assert outcome == {"result": "wire-31"}
    return passkey, request


def vote_seq(home: Path) -> int:
    with AgentKit(home=home, checkpoints=False) as kit:
        return next(r.seq for r in kit.store.records() if r.kind == "approval.vote")


def rewritten(home: Path, forged: Path, change: Any) -> Path:
    """``home``'s log written again into ``forged`` with ``change(record data)`` applied to each
    record, its hash chain made anew (what someone who can rewrite the whole log can do)."""
    with AgentKit(home=home, checkpoints=False) as kit:
        records = list(kit.store.records())
    with AgentKit(home=forged, checkpoints=False) as kit:
        entries = [Entry(r.kind, r.saga, change(json.loads(json.dumps(r.data))), r.ts)
                   for r in records]  # fmt: skip
        kit.store.append(entries, sync=True)
        assert kit.store.verify().ok
    return forged


def test_certify_fails_on_a_tampered_assertion_naming_the_record(
    home: Path, tmp_path: Path
) -> None:
    passkey, request = signed_log(home)
    seq = vote_seq(home)
    other = passkey.vote(request, "approve")["signature"]  # alice's key, another message

    def tamper(data: dict[str, Any]) -> dict[str, Any]:
        if "passkey" in data:
            data["passkey"]["signature"] = other
        return data

    result = certify(rewritten(home, tmp_path / "forged", tamper))
    assert result.exit_code == 1
    assert f"passkey vote (record {seq}) by alice: the passkey assertion does not verify" in (
        result.output
    )


def test_certify_fails_on_a_key_swapped_in_the_log(home: Path, tmp_path: Path) -> None:
    passkey, _ = signed_log(home)
    swapped = SoftPasskey("alice").public_key

    def tamper(data: dict[str, Any]) -> dict[str, Any]:
        if data.get("public_key") == passkey.public_key:
            data["public_key"] = swapped
        return data

    result = certify(rewritten(home, tmp_path / "forged", tamper))
    assert result.exit_code == 1
    assert f"passkey vote (record {vote_seq(home)}) by alice: the passkey assertion" in (
        result.output
    )
    assert certify(home).exit_code == 0  # the log as written certifies


def test_certify_fails_on_a_vote_written_around_submit_vote(home: Path) -> None:
    passkey, request = signed_log(home)
    with AgentKit(home=home, checkpoints=False) as kit:
        other = passkey.vote(request, "approve", digest="ee" * 32)
        data = {
            "request": request.id, "by": "alice", "decision": "approve", "at": time.time(),
            "nonce": other["challenge"]["nonce"], "passkey": other,
        }  # fmt: skip
        (written,) = kit.store.append([Entry("approval.vote", None, data, 0)], sync=True)
        seq = written.seq
    result = certify(home)
    assert result.exit_code == 1
    assert f"passkey vote (record {seq}) by alice: the passkey signed another action digest" in (
        result.output
    )


AGENT = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, os.environ["TESTS_DIR"])
    from agent_saga import AgentKit, SagaRolledBack
    from agent_saga._approvals.wait import Approvals
    import test_passkey_votes as t

    with open(os.environ["WIRES"], "a") as out:
        kit = AgentKit(home=os.environ["AGENT_SAGA_HOME"],
                       approvals=Approvals(approvers=["alice"], require_passkey=True, poll=0.02))
        try:
            with kit.transaction("pay"):
                out.write(t.wire(64) + "\\n")
            print("committed")
        except SagaRolledBack as exc:
            print("rolled back:", exc.cause)
        kit.close()
    """
)


@pytest.mark.parametrize("decision", ["approve", "deny"])
def test_an_agent_process_waits_for_a_passkey_decision(
    home: Path, tmp_path: Path, decision: str
) -> None:
    wires = tmp_path / "wires"
    env = {**os.environ, "AGENT_SAGA_HOME": str(home), "WIRES": str(wires),
           "TESTS_DIR": str(Path(__file__).parent)}  # fmt: skip
    passkey = SoftPasskey("alice", "Ed25519")
    with subprocess.Popen(
        [sys.executable, "-c", AGENT], env=env, stdout=subprocess.PIPE, text=True
    ) as agent:
        try:
            deadline = time.monotonic() + 60
            while not (home / "log.jsonl").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            with AgentKit(home=home, checkpoints=False) as kit:
                request = wait_for_request(kit, timeout=60)
                assert wires.read_text() == ""  # blocked on the IRREVERSIBLE step
                register_passkey(kit.store, passkey.key(), by="test")
                voted = submit_vote(
                    kit.store, request.id, "alice", decision, channel="ui-passkey",
                    passkey=passkey.vote(request, decision),
                )  # fmt: skip
                assert voted.accepted, voted.message
            out, _ = agent.communicate(timeout=60)
        finally:
            agent.kill()  # a no-op once it has finished
    if decision == "approve":
        assert out.strip() == "committed"
        assert wires.read_text() == "wire-64\n"  # exactly once
    else:
        assert out.startswith("rolled back:")
        assert "denied" in out
        assert not wires.exists() or wires.read_text() == ""
    result = certify(home)
    assert result.exit_code == 0, result.output
    assert "1 passkey votes verified" in result.output


def test_a_passkey_vote_may_follow_a_token_vote_of_the_same_approver(home: Path) -> None:
    WIRES.clear()
    passkey = SoftPasskey("alice", "Ed25519")
    approvals = Approvals(approvers=["alice"], require_passkey=True, poll=0.01)
    with AgentKit(home=home, ids=SequentialIds(), approvals=approvals) as kit:
        register_passkey(kit.store, passkey.key(), by="test")

        def agent() -> str:
            with kit.transaction("pay"):
                return wire(12)

        thread, outcome = run(agent)
        request = wait_for_request(kit)
        assert submit_vote(kit.store, request.id, "alice", "approve", channel="cli").accepted
        voted = submit_vote(
            kit.store, request.id, "alice", "approve", channel="ui-passkey",
            passkey=passkey.vote(request, "approve"),
        )  # fmt: skip
        assert voted.accepted, voted.message
        thread.join(30)
        assert outcome == {"result": "wire-12"}
        twice = submit_vote(
            kit.store, request.id, "alice", "approve", channel="ui-passkey",
            passkey=passkey.vote(request, "approve"),
        )  # fmt: skip
        assert not twice.accepted


WITHOUT_WEBAUTHN = textwrap.dedent(
    """
    import sys

    class NoWebauthn:  # py_webauthn absent, as without the agent-saga[passkeys] extra
        def find_spec(self, name, path=None, target=None):
            if name == "webauthn" or name.startswith("webauthn."):
                raise ImportError(f"No module named {name!r}")
            return None

    sys.meta_path.insert(0, NoWebauthn())
    from agent_saga import ConfigurationError
    from agent_saga._approvals.wait import Approvals
    from agent_saga.cli import main

    try:
        Approvals(approvers=["alice"], require_passkey=True)
    except ConfigurationError as exc:
        print("refused:", exc)
    main(["--home", sys.argv[1], "certify"])
    """
)


def test_without_the_extra_passkeys_are_refused_loudly_never_passed(home: Path) -> None:
    signed_log(home)
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_WEBAUTHN, str(home)],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == (
        "refused: Approvals(require_passkey=True): a passkey vote cannot be checked: py_webauthn "
        "is missing; install the extra: pip install 'agent-saga[passkeys]'"
    )
    assert any(
        line.startswith("CRITICAL: a passkey vote cannot be checked: py_webauthn is missing")
        for line in lines
    ), done.stdout
    assert "NOT CERTIFIED" in done.stdout


def test_what_passkey_approvals_rest_on_is_in_the_manifest_and_the_doc(home: Path) -> None:
    from agent_saga.proofs._passkey import PASSKEY_LIMIT

    doc = Path(__file__).resolve().parents[3] / "docs" / "guarantees.md"
    assert PASSKEY_LIMIT in " ".join(doc.read_text().split())
    approvals = Approvals(approvers=["alice"], require_passkey=True)
    with AgentKit(home=home, approvals=approvals) as kit:
        assert PASSKEY_LIMIT in kit.guarantees()["not_claimed"]


def test_a_kit_asked_for_passkeys_counts_only_passkey_votes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``require_passkey = true`` in the configuration (as ``AgentKit(require_passkey=True)``)
    gives a local kit ``Approvals(require_passkey=True)`` with the configured approvers: a
    token vote is ignored with the reason, a passkey vote decides. ``require_passkey=False``
    given to the kit wins over the file."""
    WIRES.clear()
    project = tmp_path / "project"
    project.mkdir()
    (project / "agent-saga.toml").write_text(
        'approvers = ["alice", "bob"]\nrequire_passkey = true\n'
    )
    monkeypatch.chdir(project)
    with AgentKit(home=tmp_path / "off", store="memory", require_passkey=False) as kit:
        assert kit.guarantees()["approvals"]["require_passkey"] is False
    passkey = SoftPasskey("bob", "ES256")
    with AgentKit(home=tmp_path / "home", ids=SequentialIds()) as kit:
        assert kit.guarantees()["approvals"]["require_passkey"] is True
        assert kit.guarantees()["approvals"]["approvers"] == ["alice", "bob"]
        register_passkey(kit.store, passkey.key(), by="test")

        def agent() -> str:
            with kit.transaction("pay"):
                return wire(6)

        thread, outcome = run(agent)
        request = wait_for_request(kit)
        assert submit_vote(kit.store, request.id, "alice", "approve", channel="token").accepted
        time.sleep(0.3)
        assert thread.is_alive()  # the token vote did not count
        assert WIRES == []
        submit_vote(
            kit.store, request.id, "bob", "approve", channel="ui-passkey",
            passkey=passkey.vote(request, "approve"),
        )  # fmt: skip
        thread.join(30)
        assert outcome == {"result": "wire-6"}
        found = decided(kit)
    assert found["by"] == ["bob"]
    assert found["ignored"] == ["alice: a vote without a passkey, but passkeys are required"]
    assert WIRES == [6]


def test_require_passkey_with_approvals_counting_other_votes_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConfigurationError) as raised:
        AgentKit(home=tmp_path, store="memory", require_passkey=True, approvals=Approvals())
    message = str(raised.value)
    assert "\n" not in message
    assert "require_passkey=True" in message
    assert "Approvals(require_passkey=True)" in message
    (tmp_path / "agent-saga.toml").write_text("require_passkey = 'yes'\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError, match="'require_passkey' must be true or false"):
        AgentKit(home=tmp_path, store="memory", approvals=Approvals()).close()


def test_require_passkey_given_as_anything_but_a_bool_is_one_clear_error(tmp_path: Path) -> None:
    # A truthy string must not switch passkeys on (or off) by accident.
    for value in ("yes", "false", 1):
        with pytest.raises(ConfigurationError) as raised:
            AgentKit(home=tmp_path, store="memory", require_passkey=value)  # type: ignore[arg-type]
        assert str(raised.value) == f"require_passkey must be True or False, not {value!r}"
