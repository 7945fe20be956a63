"""Issue 15, point 3: approver keys are registered and revoked only with authority.

The attacker can write the home but holds neither an administrator key nor the approver's key.
With ``Approvals(require_signature=True, approvers=["alice"])`` they make a key, register it as
alice's and sign an approval with it: the irreversible step must not run.
"""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent_saga import AgentKit, SequentialIds, tool
from agent_saga._approvals.request import ApprovalBook, ApprovalRequest
from agent_saga._approvals.wait import Approvals
from agent_saga.cli import main
from click.testing import CliRunner, Result

WIRES: list[int] = []


@tool(name="keys.wire")
def wire(usd: int) -> str:
    WIRES.append(usd)
    return f"wire-{usd}"


def cli(home: Path, *args: str) -> Result:
    return CliRunner().invoke(main, ["--home", str(home), *args])


def in_thread(body: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["result"] = body()
        except BaseException as exc:  # the test inspects it
            outcome["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    return thread, outcome


def first_request(kit: AgentKit) -> ApprovalRequest:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        requests = ApprovalBook().take_all(kit.store.records()).requests
        if requests:
            return next(iter(requests.values()))
        time.sleep(0.01)
    raise AssertionError("no approval request was logged")


def test_a_key_anyone_registers_for_alice_does_not_approve_as_alice(
    home: Path, tmp_path: Path
) -> None:
    mallory = tmp_path / "mallory.key"
    assert cli(home, "keys", "new", str(mallory)).exit_code == 0
    WIRES.clear()
    approvals = Approvals(approvers=["alice"], require_signature=True, poll=0.01, expires_after=3.0)
    with AgentKit(home=home, ids=SequentialIds(), approvals=approvals) as kit:
        added = cli(home, "keys", "add", "alice", f"{mallory}.pub")
        assert added.exit_code != 0, added.output

        def agent() -> str:
            with kit.transaction("pay"):
                return wire(1_000_000)

        thread, outcome = in_thread(agent)
        request = first_request(kit)
        voted = cli(home, "approve", request.id, "--sign", str(mallory))
        thread.join(timeout=30)
        kinds = [r.kind for r in kit.store.records()]
    assert voted.exit_code != 0, voted.output
    assert WIRES == []
    assert "expired" in str(outcome.get("error"))
    assert "approver.key_refused" in kinds  # the attempt is on the record
    assert "approver.key_added" not in kinds


def first_hash(kit: AgentKit) -> str:
    from agent_saga._log.records import GENESIS

    first = next(iter(kit.store.records()), None)
    return GENESIS if first is None else first.hash


def wait_for(kit: AgentKit, thread: threading.Thread) -> ApprovalRequest:
    request = first_request(kit)
    assert thread.is_alive()
    return request


def test_a_key_written_straight_into_the_log_is_ignored_by_the_waiting_agent(
    home: Path, tmp_path: Path, admin_key: Path
) -> None:
    """The attacker skips the CLI: they append the key record and a signed vote themselves."""
    from agent_saga._approvals.keys import key_message
    from agent_saga._approvals.request import signing_message
    from agent_saga._approvals.votes import submit_vote
    from agent_saga._log.records import Entry
    from agent_saga.proofs._note import NoteVerifier
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    mallory = Ed25519PrivateKey.generate()
    key_text = NoteVerifier("approver/alice", mallory.public_key().public_bytes_raw()).encode()
    WIRES.clear()
    approvals = Approvals(approvers=["alice"], require_signature=True, poll=0.01, expires_after=2)
    with AgentKit(home=home, ids=SequentialIds(), approvals=approvals) as kit:
        # Signed, but with the attacker's own key, claiming to be an administrator.
        signed = key_message("add", "alice", key_text, "n-1", first_hash(kit))
        forged: dict[str, Any] = {
            "approver": "alice",
            "key": key_text,
            "by": "unix:mallory",
            "authority": "admin",
            "signer": base64.b64encode(mallory.public_key().public_bytes_raw()).decode(),
            "nonce": "n-1",
            "signature": base64.b64encode(mallory.sign(signed)).decode(),
        }
        kit.store.append([Entry("approver.key_added", None, forged, 0)], sync=True)

        def agent() -> str:
            with kit.transaction("pay"):
                return wire(5)

        thread, outcome = in_thread(agent)
        request = wait_for(kit, thread)
        message = signing_message(request.id, request.saga, request.ordinal, request.digest,
                                  "nonce-1", "alice")  # fmt: skip
        signature = base64.b64encode(mallory.sign(message)).decode()
        through_api = submit_vote(kit.store, request.id, "alice", "approve", channel="forged",
                                  signature=signature, nonce="nonce-1", key=key_text)  # fmt: skip
        assert not through_api.accepted
        vote: dict[str, Any] = {
            "request": request.id, "saga": request.saga, "by": "alice", "decision": "approve",
            "channel": "forged", "note": "", "at": time.time(), "signature": signature,
            "nonce": "nonce-2", "key": key_text,
        }  # fmt: skip
        kit.store.append([Entry("approval.vote", None, vote, 0)], sync=True)
        thread.join(timeout=30)
        book = ApprovalBook().take_all(kit.store.records())
    assert WIRES == []
    assert "expired" in str(outcome.get("error"))
    assert book.keys.owners == {}
    assert [why for _, why in book.keys.refused] == [
        "signed by a key that is not a trusted administrator key"
    ]
    listed = cli(home, "keys", "list")
    assert "IGNORED record" in listed.output


def test_an_administrator_registers_the_approver_rotates_and_revokes(
    home: Path, tmp_path: Path, admin_key: Path
) -> None:
    alice1, alice2, stranger = (tmp_path / f"{n}.key" for n in ("alice1", "alice2", "stranger"))
    for key in (alice1, alice2, stranger):
        assert cli(home, "keys", "new", str(key)).exit_code == 0
    home.mkdir(exist_ok=True)
    unsigned = cli(home, "keys", "add", "alice", f"{alice1}.pub")
    assert unsigned.exit_code == 1
    assert "refused (logged)" in unsigned.output
    assert (
        cli(home, "keys", "add", "alice", f"{alice1}.pub", "--sign", str(admin_key)).exit_code == 0
    )
    # Rotation: alice's current key vouches for her next one; a stranger's key cannot.
    rotated = cli(home, "keys", "add", "alice", f"{alice2}.pub", "--sign", str(alice1))
    assert rotated.exit_code == 0, rotated.output
    by_stranger = cli(home, "keys", "add", "alice", f"{stranger}.pub", "--sign", str(stranger))
    assert by_stranger.exit_code == 1
    with AgentKit(home=home) as kit:
        book = ApprovalBook().take_all(kit.store.records())
    assert sorted(book.keys.owners.values()) == ["alice", "alice"]
    first = next(iter(book.keys.owners))
    revoked = cli(home, "keys", "revoke", first, "--sign", str(alice2))
    assert revoked.exit_code == 0, revoked.output
    with AgentKit(home=home) as kit:
        records = list(kit.store.records())
    book = ApprovalBook().take_all(records)
    assert book.keys.revoked == {first}
    assert [r.kind for r in records].count("approver.key_refused") == 2
    # Replaying the first registration after its revocation changes nothing.
    from agent_saga._log.records import Entry

    added = next(r for r in records if r.kind == "approver.key_added")
    with AgentKit(home=home) as kit:
        kit.store.append([Entry("approver.key_added", None, added.data, 0)], sync=True)
        again = ApprovalBook().take_all(kit.store.records())
    assert again.keys.revoked == {first}
    assert again.keys.refused[-1][1] == "replayed key record (its nonce was used before)"


def test_the_manifest_says_what_approvals_rest_on(home: Path) -> None:
    for signed, phrase in ((False, "file permissions of the home"), (True, "administrator key")):
        approvals = Approvals(approvers=["alice"], require_signature=signed)
        with AgentKit(home=home, approvals=approvals) as kit:
            not_claimed = kit.guarantees()["not_claimed"]
        assert any(phrase in line for line in not_claimed), not_claimed
