"""Approvals: bound to one action, single-use, expiring, from allowed approvers only."""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_saga import (
    AgentKit,
    GateRefused,
    SagaRolledBack,
    SequentialIds,
    compensator,
    read_log,
    tool,
)
from agent_saga._approvals.request import (
    ApprovalBook,
    ApprovalRequest,
    Vote,
    action_digest,
    check_vote,
    signing_message,
)
from agent_saga._approvals.votes import submit_vote
from agent_saga._approvals.wait import Approvals
from agent_saga.cli import main
from agent_saga.cli._approvals import cli_identity
from agent_saga.proofs._note import NoteVerifier
from click.testing import CliRunner
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

WIRES: list[int] = []


@tool(name="bank.wire")
def wire(usd: int, to: dict[str, str]) -> str:
    WIRES.append(usd)
    return f"wire-{usd}"


@compensator("approvals.unhold")
def unhold(result: str) -> None:
    return None


@tool(name="bank.hold", compensate="approvals.unhold")
def hold(usd: int) -> str:
    return f"hold-{usd}"


def requests_of(kit: AgentKit) -> list[ApprovalRequest]:
    return list(ApprovalBook().take_all(kit.store.records()).requests.values())


def wait_for_request(kit: AgentKit, timeout: float = 10.0) -> ApprovalRequest:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = requests_of(kit)
        if found:
            return found[-1]
        time.sleep(0.01)
    raise AssertionError("no approval request was logged")


@pytest.fixture
def run_agent() -> Iterator[Callable[[Callable[[], Any]], dict[str, Any]]]:
    """Run an agent's transaction in a thread; returns its outcome dict (filled when done)."""
    threads: list[threading.Thread] = []

    def start(body: Callable[[], Any]) -> dict[str, Any]:
        outcome: dict[str, Any] = {}

        def target() -> None:
            try:
                outcome["result"] = body()
            except BaseException as exc:  # the test inspects it
                outcome["error"] = exc

        thread = threading.Thread(target=target)
        thread.start()
        threads.append(thread)
        outcome["thread"] = thread
        return outcome

    yield start
    for thread in threads:
        thread.join(timeout=30)


def finished(outcome: dict[str, Any]) -> dict[str, Any]:
    outcome["thread"].join(timeout=30)
    assert not outcome["thread"].is_alive()
    return outcome


def test_an_approved_irreversible_step_runs_once(home: Path, run_agent: Any) -> None:
    WIRES.clear()
    approvals = Approvals(approvers=["alice"], poll=0.01)
    with AgentKit(home=home, ids=SequentialIds(), approvals=approvals) as kit:

        def agent() -> str:
            with kit.transaction("pay"):
                return wire(900, {"iban": "DE00"})

        outcome = run_agent(agent)
        request = wait_for_request(kit)
        assert WIRES == []  # nothing runs while the human thinks
        assert request.digest == action_digest(
            "bank.wire", "irreversible", {"usd": 900, "to": {"iban": "DE00"}}
        )
        assert submit_vote(kit.store, request.id, "alice", "approve", channel="test").accepted
        assert finished(outcome)["result"] == "wire-900"
        late = submit_vote(kit.store, request.id, "alice", "approve", channel="test")
        assert not late.accepted
        assert "already decided" in late.message
    assert WIRES == [900]
    certified = CliRunner().invoke(main, ["--home", str(home), "certify"])
    assert certified.exit_code == 0, certified.output


def test_a_denial_refuses_the_step_and_rolls_the_saga_back(home: Path, run_agent: Any) -> None:
    WIRES.clear()
    approvals = Approvals(approvers=["alice"], poll=0.01)
    with AgentKit(home=home, ids=SequentialIds(), approvals=approvals) as kit:

        def agent() -> None:
            with kit.transaction("pay"):
                hold(5)
                wire(900, {"iban": "DE00"})

        outcome = run_agent(agent)
        request = wait_for_request(kit)
        submit_vote(kit.store, request.id, "alice", "deny", channel="test", note="not today")
        error = finished(outcome)["error"]
        assert isinstance(error, SagaRolledBack)
        assert isinstance(error.cause, GateRefused)
        assert "denied" in error.cause.reason
        assert [s.tool for s in error.report.compensated] == ["bank.hold"]
    assert WIRES == []


def test_an_expired_request_is_denied_and_logged(home: Path) -> None:
    WIRES.clear()
    approvals = Approvals(approvers=["alice"], expires_after=0.2, poll=0.01)
    with AgentKit(home=home, approvals=approvals) as kit:
        with pytest.raises(SagaRolledBack) as caught, kit.transaction("pay"):
            wire(1, {"iban": "DE00"})
        assert "expired" in str(caught.value.cause)
        request = requests_of(kit)[0]
        late = submit_vote(kit.store, request.id, "alice", "approve", channel="test")
        assert not late.accepted
        book = ApprovalBook().take_all(kit.store.records())
        assert book.decided[request.id] == "expired"
    assert WIRES == []


def test_only_allowed_approvers_count_and_refusals_are_logged(home: Path, run_agent: Any) -> None:
    approvals = Approvals(approvers=["alice", "bob"], poll=0.01)
    with AgentKit(home=home, approvals=approvals) as kit:

        def agent() -> str:
            with kit.transaction("pay"):
                return wire(2, {"iban": "DE00"})

        outcome = run_agent(agent)
        request = wait_for_request(kit)
        mallory = submit_vote(kit.store, request.id, "mallory", "approve", channel="test")
        assert not mallory.accepted
        assert "may not approve" in mallory.message
        assert outcome["thread"].is_alive()  # mallory decided nothing
        assert submit_vote(kit.store, request.id, "bob", "approve", channel="test").accepted
        assert finished(outcome)["result"] == "wire-2"
        refused = [r for r in kit.store.records() if r.kind == "approval.refused"]
        assert [r.data["by"] for r in refused] == ["mallory"]


def test_a_quorum_counts_each_approver_once(home: Path, run_agent: Any) -> None:
    from agent_saga import RequireApproval, ToolCall

    class TwoOfThree:
        name = "two_of_three"

        def evaluate(self, call: ToolCall) -> RequireApproval:
            return RequireApproval(self.name, "big wire", ("alice", "bob", "carol"), 2)

    approvals = Approvals(poll=0.01)
    with AgentKit(home=home, approvals=approvals, rules=[TwoOfThree()]) as kit:

        def agent() -> str:
            with kit.transaction("pay"):
                return hold(3)

        outcome = run_agent(agent)
        request = wait_for_request(kit)
        assert request.quorum == 2
        assert submit_vote(kit.store, request.id, "alice", "approve", channel="a").accepted
        again = submit_vote(kit.store, request.id, "alice", "approve", channel="b")
        assert not again.accepted  # counted once
        time.sleep(0.1)
        assert outcome["thread"].is_alive()
        assert submit_vote(kit.store, request.id, "carol", "approve", channel="c").accepted
        assert finished(outcome)["result"] == "hold-3"
        decided = [r for r in kit.store.records() if r.kind == "approval.decided"]
        assert decided[0].data["by"] == ["alice", "carol"]


def test_arguments_changed_while_waiting_do_not_reach_the_tool(home: Path, run_agent: Any) -> None:
    """The caller's dict is changed after the human looked at it: the tool still gets exactly
    the approved values (a snapshot taken before the gate), never the attacker's."""
    WIRES.clear()
    approvals = Approvals(approvers=["alice"], poll=0.01)
    payee = {"iban": "DE00"}
    received: list[str] = []

    @tool(name="bank.wire_to")
    def wire_to(usd: int, to: dict[str, str]) -> str:
        received.append(to["iban"])
        return f"wire-{usd}"

    with AgentKit(home=home, approvals=approvals) as kit:

        def agent() -> str:
            with kit.transaction("pay"):
                return wire_to(4, payee)

        outcome = run_agent(agent)
        request = wait_for_request(kit)
        payee["iban"] = "XX99-attacker"  # mutated after the human looked at it
        submit_vote(kit.store, request.id, "alice", "approve", channel="test")
        assert finished(outcome)["result"] == "wire-4"
        (decided,) = [r for r in kit.store.records() if r.kind == "approval.decided"]
        (intent,) = [r for r in kit.store.records() if r.kind == "step.intent"]
    assert received == ["DE00"]
    assert decided.data["decision"] == "approved"
    assert intent.data["args"] == {"usd": 4, "to": {"iban": "DE00"}}


def test_an_async_step_awaits_without_blocking_the_event_loop(home: Path) -> None:
    @tool(name="bank.async_wire")
    async def async_wire(usd: int) -> str:
        return f"async-{usd}"

    approvals = Approvals(approvers=["alice"], poll=0.01)
    with AgentKit(home=home, approvals=approvals) as kit:

        async def approver() -> int:
            ticks = 0
            while not requests_of(kit):
                ticks += 1
                await asyncio.sleep(0.01)
            request = requests_of(kit)[0]
            submit_vote(kit.store, request.id, "alice", "approve", channel="test")
            return ticks

        async def main_task() -> tuple[str, int]:
            async def agent() -> str:
                async with kit.transaction("pay"):
                    return await async_wire(7)

            return await asyncio.gather(agent(), approver())

        result, ticks = asyncio.run(main_task())
    assert result == "async-7"
    assert ticks >= 0


def test_no_configured_approver_refuses_at_once(home: Path) -> None:
    with (
        AgentKit(home=home, approvals=Approvals(poll=0.01)) as kit,
        pytest.raises(SagaRolledBack) as caught,
        kit.transaction("pay"),
    ):
        wire(1, {"iban": "DE00"})
    assert "no approver is configured" in str(caught.value.cause)


# -- Ed25519 ---------------------------------------------------------------------------------

RFC8032 = [
    (
        "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
        "",
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
    ),
    (
        "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
        "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
        "72",
        "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00",
    ),
]


@pytest.mark.parametrize(("secret", "public", "message", "signature"), RFC8032)
def test_rfc8032_known_answers_pass_through_our_verifier(
    secret: str, public: str, message: str, signature: str
) -> None:
    verifier = NoteVerifier("rfc8032", bytes.fromhex(public))
    assert verifier.verify(bytes.fromhex(message), bytes.fromhex(signature))
    tampered = bytearray(bytes.fromhex(signature))
    tampered[0] ^= 1
    assert not verifier.verify(bytes.fromhex(message), bytes(tampered))
    key = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(secret))
    assert key.sign(bytes.fromhex(message)).hex() == signature


def signed_setup() -> tuple[ApprovalRequest, ApprovalBook, Ed25519PrivateKey, str]:
    key = Ed25519PrivateKey.generate()
    key_text = NoteVerifier("approver/alice", key.public_key().public_bytes_raw()).encode()
    book = ApprovalBook()
    book.keys.add("alice", key_text)
    digest = action_digest("bank.wire", "irreversible", {"usd": 10})
    request = ApprovalRequest(
        "apr-1", "saga-1", 2, "bank.wire", "irreversible", digest, {"usd": 10},
        "irreversible", "needs a human", ("alice",), 1, 100.0, 200.0,
    )  # fmt: skip
    return request, book, key, key_text


def sign(key: Ed25519PrivateKey, **fields: Any) -> str:
    message = signing_message(
        fields["request"], fields["saga"], fields["ordinal"], fields["digest"],
        fields["nonce"], fields["approver"],
    )  # fmt: skip
    return base64.b64encode(key.sign(message)).decode()


def test_a_signature_counts_only_for_exactly_the_action_it_signed() -> None:
    request, book, key, key_text = signed_setup()
    honest = {
        "request": request.id, "saga": request.saga, "ordinal": request.ordinal,
        "digest": request.digest, "nonce": "n1", "approver": "alice",
    }  # fmt: skip

    def vote(signed: dict[str, Any], at: float = 150.0) -> Vote:
        return Vote(
            request.id, "alice", "approve", "", "key", at, sign(key, **signed), "n1", key_text
        )

    assert check_vote(vote(honest), request, book.keys, request.digest) is None
    other_args = action_digest("bank.wire", "irreversible", {"usd": 10_000})
    for field, value in [
        ("saga", "saga-2"),
        ("ordinal", 3),
        ("digest", other_args),
        ("request", "apr-2"),
        ("nonce", "n2"),
        ("approver", "bob"),
    ]:
        problem = check_vote(vote({**honest, field: value}), request, book.keys, request.digest)
        assert problem is not None, field
    # Executed with other arguments than approved: the honest signature no longer counts.
    assert check_vote(vote(honest), request, book.keys, other_args) is not None
    assert "expired" in str(check_vote(vote(honest, at=250.0), request, book.keys, request.digest))
    book.keys.revoked.add(key_text)
    assert "registered, unrevoked" in str(
        check_vote(vote(honest), request, book.keys, request.digest)
    )


def test_cli_approve_sign_and_a_replayed_signature(
    home: Path, run_agent: Any, tmp_path: Path, admin_key: Path
) -> None:
    runner = CliRunner()
    key_file = tmp_path / "alice.key"
    assert runner.invoke(main, ["--home", str(home), "keys", "new", str(key_file)]).exit_code == 0
    approvals = Approvals(approvers=["alice"], poll=0.01, require_signature=True)
    with AgentKit(home=home, approvals=approvals) as kit:
        added = runner.invoke(
            main,
            [
                "--home",
                str(home),
                "keys",
                "add",
                "alice",
                f"{key_file}.pub",
                "--sign",
                str(admin_key),
            ],
        )
        assert added.exit_code == 0, added.output

        def agent() -> str:
            with kit.transaction("pay"):
                return wire(11, {"iban": "DE00"})

        outcome = run_agent(agent)
        request = wait_for_request(kit)
        listed = runner.invoke(main, ["--home", str(home), "approvals"])
        assert request.id in listed.output
        assert '"usd": 11' in listed.output
        signed = runner.invoke(
            main, ["--home", str(home), "approve", request.id, "--sign", str(key_file)]
        )
        assert signed.exit_code == 0, signed.output
        assert finished(outcome)["result"] == "wire-11"
        vote = next(r for r in kit.store.records() if r.kind == "approval.vote")
        replay = submit_vote(
            kit.store,
            request.id,
            "alice",
            "approve",
            channel="replay",
            signature=str(vote.data["signature"]),
            nonce=str(vote.data["nonce"]),
            key=str(vote.data["key"]),
        )
        assert not replay.accepted


CLI = str(Path(sys.executable).parent / "agent-saga")
AGENT = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, os.environ["TESTS_DIR"])
    from agent_saga import AgentKit, SagaRolledBack
    from agent_saga._approvals.wait import Approvals
    import test_approvals as t

    with open(os.environ["WIRES"], "a") as out:
        kit = AgentKit(home=os.environ["AGENT_SAGA_HOME"],
                       approvals=Approvals(approvers=[os.environ["APPROVER"]], poll=0.02,
                                           expires_after=float(os.environ["EXPIRES"])))
        try:
            with kit.transaction("pay"):
                t.hold(1)
                out.write(t.wire(int(os.environ["USD"]), {"iban": "DE00"}) + "\\n")
            print("committed")
        except SagaRolledBack as exc:
            print("rolled back:", exc.cause)
        kit.close()
    """
)


@pytest.mark.parametrize("decision", ["approve", "deny", "expire"])
def test_another_process_decides_through_the_cli(home: Path, tmp_path: Path, decision: str) -> None:
    wires = tmp_path / "wires"
    env = {
        **os.environ,
        "AGENT_SAGA_HOME": str(home),
        "TESTS_DIR": str(Path(__file__).parent),
        "WIRES": str(wires),
        "APPROVER": cli_identity(),
        "USD": "77",
        # long enough for a loaded machine's CLI listing to see the request before it expires
        "EXPIRES": "6" if decision == "expire" else "600",
    }
    with subprocess.Popen(
        [sys.executable, "-c", AGENT], env=env, stdout=subprocess.PIPE, text=True
    ) as agent:  # on leaving: its pipe closed, the process reaped
        try:
            request_id = None
            deadline = time.monotonic() + 30
            while request_id is None and time.monotonic() < deadline:
                listed = subprocess.run(
                    [CLI, "approvals"],
                    env=env, capture_output=True, text=True, check=False,  # 2 until the home exists
                )  # fmt: skip
                found = [w for w in listed.stdout.split() if w.startswith("apr-")]
                request_id = found[0] if found else None
                time.sleep(0.05)
            assert request_id is not None
            if decision != "expire":
                done = subprocess.run(
                    [CLI, decision, request_id, "--note", "checked"],
                    env=env, capture_output=True, text=True, check=False,
                )  # fmt: skip
                assert done.returncode == 0, done.stderr + done.stdout
            out, _ = agent.communicate(timeout=30)
            if decision == "expire":  # too late now: the CLI is told so, and it is logged
                late = subprocess.run(
                    [CLI, "approve", request_id],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=False,
                )
                assert late.returncode == 1
                assert "already decided: expired" in late.stdout
        finally:
            agent.kill()  # a no-op once it has finished
    if decision == "approve":
        assert out.strip() == "committed"
        assert wires.read_text() == "wire-77\n"  # exactly once
    else:
        assert out.startswith("rolled back:")
        assert ("denied" if decision == "deny" else "expired") in out
        assert not wires.exists() or wires.read_text() == ""
        with AgentKit(home=home, checkpoints=False) as kit:
            kinds = [r.kind for r in kit.store.records()]
        assert "approval.decided" in kinds
        assert kinds.count("approval.refused") == (1 if decision == "expire" else 0)


def test_each_request_needs_its_own_votes(home: Path, run_agent: Any) -> None:
    """A quorum is per request: votes on one never count toward the next identical one."""
    approvals = Approvals(approvers=["alice", "bob"], poll=0.01, expires_after=0.5)
    with AgentKit(home=home, ids=SequentialIds(), approvals=approvals) as kit:

        def agent() -> str:
            with kit.transaction("pay"):
                return wire(9, {"iban": "DE00"})

        first = run_agent(agent)
        request = wait_for_request(kit)
        assert submit_vote(kit.store, request.id, "alice", "approve", channel="t").accepted
        assert finished(first)["result"] == "wire-9"
        second = run_agent(agent)  # the same action again, in a new saga
        deadline = time.monotonic() + 10
        while len(requests_of(kit)) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        error = finished(second)["error"]  # nobody voted again: it expires
        assert "expired" in str(error.cause)


def test_request_ids_are_unguessable() -> None:
    from agent_saga._approvals.wait import new_request_id

    ids = {new_request_id() for _ in range(1000)}
    assert len(ids) == 1000
    assert all(len(i) == 4 + 16 for i in ids)


def test_two_approval_rules_combine_into_one_approval_that_satisfies_both() -> None:
    from agent_saga import Deny, Gate, RequireApproval, Semantics, ToolCall

    class Needs:
        def __init__(self, name: str, approvers: tuple[str, ...], quorum: int) -> None:
            self.name, self.approvers, self.quorum = name, approvers, quorum

        def evaluate(self, call: ToolCall) -> RequireApproval:
            return RequireApproval(self.name, f"{self.name} says so", self.approvers, self.quorum)

    call = ToolCall("bank.wire", Semantics.IRREVERSIBLE, {"usd": 1}, "saga-1", 1)
    both = Gate([Needs("finance", ("alice", "bob", "carol"), 2)]).evaluate(call)
    assert isinstance(both, RequireApproval)
    assert (both.approvers, both.quorum) == (("alice", "bob", "carol"), 2)  # not weakened
    narrowed = Gate(
        [Needs("finance", ("alice", "bob", "carol"), 2), Needs("security", ("bob", "carol"), 1)]
    ).evaluate(call)
    assert isinstance(narrowed, RequireApproval)
    assert (narrowed.approvers, narrowed.quorum) == (("bob", "carol"), 2)
    disjoint = Gate([Needs("a", ("alice",), 1), Needs("b", ("bob",), 1)]).evaluate(call)
    assert isinstance(disjoint, Deny)
    too_many = Gate([Needs("a", ("alice", "bob"), 1), Needs("b", (), 3)]).evaluate(call)
    assert isinstance(too_many, Deny)


def test_replay_shows_where_a_steps_approval_stands(home: Path) -> None:
    approvals = Approvals(approvers=["alice"], expires_after=0.1, poll=0.01)
    with (
        AgentKit(home=home, ids=SequentialIds(), approvals=approvals) as kit,
        pytest.raises(SagaRolledBack),
        kit.transaction("pay"),
    ):
        wire(5, {"iban": "DE00"})
    shown = CliRunner().invoke(main, ["--home", str(home), "replay", "saga-0001"])
    assert shown.exit_code == 0, shown.output
    assert "approval      expired (apr-" in shown.output
    assert "not interpreted" not in shown.output


def test_an_approved_wire_in_a_saga_that_then_fails_needs_a_human(
    home: Path, run_agent: Any
) -> None:
    approvals = Approvals(approvers=["alice"], poll=0.01)
    with AgentKit(home=home, ids=SequentialIds(), approvals=approvals) as kit:

        def agent() -> None:
            with kit.transaction("pay"):
                hold(1)
                wire(8, {"iban": "DE00"})
                raise RuntimeError("the invoice system is down")

        outcome = run_agent(agent)
        submit_vote(kit.store, wait_for_request(kit).id, "alice", "approve", channel="test")
        error = finished(outcome)["error"]
        assert isinstance(error, SagaRolledBack)
        assert error.report.status.value == "needs_human"  # the wire stands; the hold was undone
        assert [s.tool for s in error.report.compensated] == ["bank.hold"]
        end = [r for r in kit.store.records() if r.kind == "saga.end"][-1]
    assert end.data["status"] == "needs_human"
    assert end.data["irreversible"] == [2]


def test_a_fake_clock_lets_an_async_request_expire(home: Path) -> None:
    from agent_saga import FakeClock

    @tool(name="bank.async_wire2")
    async def async_wire(usd: int) -> str:
        return f"async-{usd}"

    approvals = Approvals(approvers=["alice"], expires_after=5, poll=0.5)
    with AgentKit(home=home, clock=FakeClock(), approvals=approvals) as kit:

        async def agent() -> str:
            async with kit.transaction("pay"):
                return await async_wire(1)

        with pytest.raises(SagaRolledBack) as caught:
            asyncio.run(agent())
    assert "expired" in str(caught.value.cause)


class _WokenApprovals(Approvals):
    """Looks at the log every 30 s unless a vote was written and ``voted`` set."""

    def __init__(self) -> None:
        super().__init__(approvers=["alice"], poll=30.0)
        self.voted = threading.Event()

    def pause(self, request: Any, clock: Any, seconds: float) -> None:
        self.voted.wait(seconds)


def test_a_pause_that_returns_on_a_vote_and_an_unsynced_vote_the_decision_makes_durable(
    home: Path, run_agent: Any
) -> None:
    WIRES.clear()
    approvals = _WokenApprovals()
    with AgentKit(home=home, ids=SequentialIds(), approvals=approvals) as kit:

        def agent() -> str:
            with kit.transaction("pay"):
                return wire(40, {"iban": "DE00"})

        outcome = run_agent(agent)
        request = wait_for_request(kit)
        start = time.monotonic()
        vote = submit_vote(kit.store, request.id, "alice", "approve", channel="test", sync=False)
        assert vote.accepted
        approvals.voted.set()
        assert finished(outcome)["result"] == "wire-40"
        assert time.monotonic() - start < 15  # woken, not after the 30 s look
    kinds = [r.kind for r in read_log(home) if r.kind.startswith("approval.")]
    assert kinds == ["approval.requested", "approval.vote", "approval.decided"]
    assert WIRES == [40]
