"""Agents against a real control plane (SQLite in its home): shipping, sagas, approvals,
budgets, the kill switch, audit exports, and what the manifest and status say. The checks in
``fleet_checks`` run here, and against a PostgreSQL replica in ``test_replicas``."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import fleet_checks as checks
import pytest
from agent_saga import (
    IRREVERSIBLE,
    AgentKit,
    Approvals,
    Budget,
    ConfigurationError,
    FakeClock,
    GateRefused,
    HaltedError,
    SagaRolledBack,
    read_log,
)
from fleet_checks import OPENED, agent_kit, close_opened, shipped, wait_until
from plane_testkit import RunningServer, free_port


@pytest.fixture(autouse=True)
def _close_kits() -> Iterator[None]:
    """Every kit a test opened is closed after it, also when the test failed."""
    yield
    close_opened()


def test_records_ship_sagas_list_and_a_saga_reads_as_replay_tells_it(
    server: RunningServer, tmp_path: Path
) -> None:
    checks.records_ship_sagas_list_and_a_saga_reads_as_replay_tells_it(server, tmp_path)


def test_approval_quorum_identity_single_use_and_the_decision_reaches_the_agent(
    server: RunningServer, tmp_path: Path
) -> None:
    checks.approval_quorum_identity_single_use_and_the_decision_reaches_the_agent(server, tmp_path)


def test_checkpoints_disclosure_and_certify_from_the_server(
    server: RunningServer, tmp_path: Path
) -> None:
    checks.checkpoints_disclosure_and_certify_from_the_server(server, tmp_path)


def test_an_expired_request_takes_no_vote_and_ready_names_the_database(
    server: RunningServer,
) -> None:
    checks.an_expired_request_takes_no_vote_and_ready_names_the_database(server)


def test_a_conflicting_record_is_a_409_kept_as_evidence(
    server: RunningServer, tmp_path: Path
) -> None:
    checks.a_conflicting_record_is_a_409_kept_as_evidence(server, tmp_path)


def test_a_denial_refuses_the_call(server: RunningServer, tmp_path: Path) -> None:
    carol = server.token("approver", "carol")
    kit = agent_kit(server, tmp_path / "c", "deny-c")

    @kit.tool(name="db.drop", semantics=IRREVERSIBLE)
    def drop(table: str) -> str:
        return table

    def deny() -> None:
        with server.client(carol) as client:
            for _ in range(50):
                rows = client.get("/v1/approvals", params={"status": "pending", "wait": 5})
                mine = [r for r in rows.json()["approvals"] if r["origin"] == "deny-c"]
                if mine:
                    client.post(f"/v1/approvals/{mine[0]['id']}/votes", json={"decision": "deny"})
                    return

    thread = threading.Thread(target=deny)
    thread.start()
    with pytest.raises(SagaRolledBack) as failed, kit.transaction("cleanup"):
        drop("users")
    thread.join(20)
    assert isinstance(failed.value.cause, GateRefused)
    assert "denied" in str(failed.value.cause)
    kit.close()


def test_budgets_are_shared_by_agents_and_never_exceed_the_cap(
    server: RunningServer, tmp_path: Path
) -> None:
    with server.client(server.admin) as admin:
        assert admin.put("/v1/budgets/fleet-ads", json={"cap": "50"}).status_code == 200
    kits = [
        agent_kit(server, tmp_path / f"k{i}", f"budget-{i}",
                  rules=[Budget("fleet-ads", 1000, tools="ads.buy")])
        for i in range(2)
    ]  # fmt: skip
    bought: list[int] = []
    lock = threading.Lock()

    def run(kit: AgentKit) -> None:
        @kit.tool(name="ads.buy", compensate=lambda amount: None)
        def buy(amount: int) -> int:
            with lock:
                bought.append(amount)
            return amount

        for _ in range(8):
            try:
                with kit.transaction("spend"):
                    buy(5)
            except SagaRolledBack:
                pass

    threads = [threading.Thread(target=run, args=(k,)) for k in kits for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sum(bought) == 50  # 32 attempts of 5 against a server cap of 50
    with server.client(server.admin) as admin:
        [row] = [b for b in admin.get("/v1/budgets").json()["budgets"] if b["name"] == "fleet-ads"]
        assert (row["spent"], row["held"], row["cap"]) == ("50", "0", "50")
    for kit in kits:
        kit.close()


def test_halt_reaches_the_agent_a_silent_server_makes_it_refuse_and_it_resumes_after(
    server: RunningServer, tmp_path: Path
) -> None:
    kit = agent_kit(server, tmp_path / "d", "halt-d")

    @kit.tool(name="arm.move", compensate=lambda angle: None)
    def move(angle: int) -> int:
        return angle

    with kit.transaction("ok"):
        move(1)
    assert kit.status().ready
    assert kit.guarantees()["kill_switch"]["kind"] == "server"
    assert any("after the fact" in n for n in kit.guarantees()["not_claimed"])
    with server.client(server.admin) as admin:
        admin.post("/v1/killswitch/halt", json={"reason": "incident 7"})
        started = time.monotonic()
        wait_until(lambda: kit.runtime.kill_switch.state().halted, timeout=1.0)
        assert time.monotonic() - started < 1.0
        with pytest.raises(HaltedError, match="incident 7"), kit.transaction("blocked"):
            move(2)
        assert not kit.status().ready
        admin.post("/v1/killswitch/resume", json={"reason": "fixed"})
        wait_until(lambda: not kit.runtime.kill_switch.state().halted)
        events = admin.get("/v1/audit/events", params={"order": "newest", "limit": 2}).json()
        assert [(e["action"], e["details"]["reason"]) for e in events["events"]] == [
            ("resume", "fixed"), ("halt", "incident 7"),
        ]  # fmt: skip
    server.process.send_signal(signal.SIGSTOP)  # the server goes silent (a hung host)
    try:
        stopped = time.monotonic()
        wait_until(lambda: kit.runtime.kill_switch.state().halted, timeout=3.0)
        assert time.monotonic() - stopped < 2.0
        state = kit.runtime.kill_switch.state()
        assert not state.readable
        assert "stale" in state.reason
        with pytest.raises(HaltedError), kit.transaction("no server"):
            move(3)
        assert not kit.status().ready
    finally:
        server.process.send_signal(signal.SIGCONT)
    wait_until(lambda: not kit.runtime.kill_switch.state().halted)
    with kit.transaction("after the outage"):
        move(4)
    assert kit.status().ready
    local = list(read_log(tmp_path / "d"))
    wait_until(lambda: shipped(server, "halt-d") == local[-1].seq)
    with server.client(server.admin) as admin:
        page = admin.get("/v1/sagas", params={"origin": "halt-d"}).json()
    # a transaction refused by the kill switch writes no saga
    assert [saga["name"] for saga in page["sagas"]] == ["after the outage", "ok"]


def test_an_agent_that_cannot_reach_its_server_refuses_effects_and_is_not_ready(
    tmp_path: Path,
) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    kit = AgentKit(home=tmp_path / "lonely", server=url, token="asg_" + "0" * 16 + "_" + "x" * 43)
    OPENED.append(kit)

    @kit.tool(name="door.open", compensate=lambda door: None)
    def open_door(door: str) -> str:
        return door

    with pytest.raises(HaltedError, match="kill switch unknown"), kit.transaction("try"):
        open_door("front")
    status = kit.status()
    assert not status.ready
    assert any("kill switch" in reason for reason in status.reasons)
    assert [r.kind for r in read_log(tmp_path / "lonely") if r.kind == "step.done"] == []
    kit.close()


def test_the_manifest_and_status_describe_server_mode(
    server: RunningServer, tmp_path: Path
) -> None:
    kit = agent_kit(server, tmp_path / "g", "manifest-g", rules=[Budget("g", 10)])
    manifest = kit.guarantees()
    assert manifest["server"]["url"] == server.url
    assert manifest["server"]["origin"] == "manifest-g"
    assert "server store" in manifest["gate"]["rules"][0]["describes"]
    assert manifest["approvals"]["via"] == f"control plane {server.url}"
    assert kit.status().checks["server"] == "ok"
    kit.close()
    with pytest.raises(ConfigurationError, match="agent token"):
        AgentKit(home=tmp_path / "h", server=server.url, token=server.admin)
    with pytest.raises(ConfigurationError, match="refused the token"):
        AgentKit(home=tmp_path / "h", server=server.url, token="asg_0000000000000000_" + "x" * 43)
    keyed = server.token("agent", "keyed-g")
    with pytest.raises(ConfigurationError, match="a keyed chain"):
        AgentKit(home=tmp_path / "k", server=server.url, token=keyed, chain_key=b"k" * 32)


def test_the_configuration_file_points_a_kit_at_the_server(
    server: RunningServer, tmp_path: Path
) -> None:
    """``server`` and ``server_token_file`` in agent-saga.toml (the working directory's)."""
    token = tmp_path / "secrets" / "agent.token"
    token.parent.mkdir()
    token.write_text(server.token("agent", "configured-c") + "\n")
    token.chmod(0o600)
    (tmp_path / "agent-saga.toml").write_text(
        f'server = "{server.url}"\nserver_token_file = "secrets/agent.token"\n'
    )
    kit = AgentKit(home=tmp_path / "configured")
    OPENED.append(kit)
    assert kit.guarantees()["server"]["origin"] == "configured-c"
    kit.close()
    token.chmod(0o640)
    with pytest.raises(ConfigurationError, match=r"^the token file .* is open to other users"):
        AgentKit(home=tmp_path / "configured")


def test_no_cors_from_a_server_started_without_cors_origins(server: RunningServer) -> None:
    preflight = {"Access-Control-Request-Method": "GET"}
    with server.client() as client:
        for origin in ("https://console.example", "https://evil.example"):
            answer = client.get("/v1/health", headers={"Origin": origin})
            assert "access-control-allow-origin" not in answer.headers
            refused = client.options("/v1/whoami", headers={"Origin": origin, **preflight})
            assert refused.status_code == 405
            assert "access-control-allow-origin" not in refused.headers


def test_the_decision_wakes_the_waiting_step_and_the_vote_is_kept_before_it(
    server: RunningServer, tmp_path: Path
) -> None:
    """The channel wakes the step once the server's vote is in the log: with the step's own
    look at the log every 30 s, the approved step still runs within seconds; the log holds the
    vote, then the decision (written durably before the step ran)."""
    dana = server.token("approver", "dana")
    kit = agent_kit(server, tmp_path / "d", "wake-d")
    approvals = kit.runtime.approvals
    assert isinstance(approvals, Approvals)
    approvals.poll = 30.0
    ran: list[float] = []

    @kit.tool(name="bank.wire", semantics=IRREVERSIBLE)
    def wire(amount: int) -> int:
        ran.append(time.monotonic())
        return amount

    def approve() -> None:
        with server.client(dana) as client:
            for _ in range(50):
                rows = client.get("/v1/approvals", params={"status": "pending", "wait": 5})
                mine = [r for r in rows.json()["approvals"] if r["origin"] == "wake-d"]
                if mine:
                    vote = {"decision": "approve"}
                    client.post(f"/v1/approvals/{mine[0]['id']}/votes", json=vote)
                    return

    thread = threading.Thread(target=approve)
    thread.start()
    start = time.monotonic()
    with kit.transaction("payout"):
        wire(5)
    thread.join(20)
    assert len(ran) == 1
    assert ran[0] - start < 15  # far less than one 30 s look of the waiting step
    kit.close()
    kinds = [r.kind for r in read_log(tmp_path / "d") if r.kind.startswith("approval.")]
    assert kinds == ["approval.requested", "approval.vote", "approval.decided"]


def test_a_kit_made_to_require_passkeys_does_not_act_on_a_plain_approval(
    server: RunningServer, tmp_path: Path
) -> None:
    """``AgentKit(server=..., require_passkey=True)``: the connector builds approvals that count
    only passkey votes. An approver's plain vote approves the request on the server and reaches
    the agent's log, but is not counted: the step does not run, and at the request's expiry it
    is refused, the decision naming the vote ignored and why. (A passkey vote through the same
    switch, in a browser: ``ui/test_passkeys.py``.)"""
    erin = server.token("approver", "erin")
    clock = FakeClock(time.time())
    kit = agent_kit(server, tmp_path / "p", "passkey-p", require_passkey=True, clock=clock)
    assert kit.guarantees()["approvals"]["require_passkey"] is True
    ran: list[int] = []
    outcome: dict[str, str] = {}

    @kit.tool(name="bank.wire", semantics=IRREVERSIBLE)
    def wire(amount: int) -> int:
        ran.append(amount)
        return amount

    def agent() -> None:
        try:
            with kit.transaction("payout"):
                wire(7)
        except Exception as exc:  # the test reads which
            outcome["error"] = type(exc).__name__

    thread = threading.Thread(target=agent)
    thread.start()
    try:
        with server.client(erin) as client:
            for _ in range(50):
                rows = client.get("/v1/approvals", params={"status": "pending", "wait": 5})
                mine = [r for r in rows.json()["approvals"] if r["origin"] == "passkey-p"]
                if mine:
                    break
            path = f"/v1/approvals/{mine[0]['id']}/votes"
            assert client.post(path, json={"decision": "approve"}).json()["status"] == "approved"
        wait_until(lambda: any(r.kind == "approval.vote" for r in kit.store.records()))
        time.sleep(0.5)
        assert thread.is_alive()  # the plain vote did not count
        assert ran == []
        clock.advance(601)  # past the request's expiry (600 s)
    finally:
        thread.join(20)
    assert not thread.is_alive()
    assert ran == []
    assert outcome == {"error": "SagaRolledBack"}
    (decided,) = [r.data for r in kit.store.records() if r.kind == "approval.decided"]
    assert decided["decision"] == "expired"
    assert decided["ignored"] == ["erin: a vote without a passkey, but passkeys are required"]


PAUSED_AGENT = """
import os, sys
from agent_saga import REVERSIBLE, AgentKit, HaltedError

home, url, token, stop = sys.argv[1:5]
kit = AgentKit(home=home, server=url, token=token)

@kit.tool(name="crm.tag", semantics=REVERSIBLE)
def tag(i: int) -> int:
    return i

print("ready", flush=True)
while not os.path.exists(stop):
    try:
        with kit.transaction("tagging"):
            tag(1)
    except HaltedError as exc:
        print("refused:", exc, flush=True)
        break
kit.close()
print("done", flush=True)
"""
"""An agent that runs transactions back to back until told to stop, and says when one is
refused."""


def test_an_agent_paused_longer_than_stale_after_is_not_refused_on_waking(
    server: RunningServer, tmp_path: Path
) -> None:
    """The agent's own pause (here SIGSTOP; in life CPU starvation or a suspended laptop) leaves
    the server's newer states waiting in its socket: the first effect after it waits for one
    instead of being refused as if the server had gone silent."""
    script, stop = tmp_path / "paused_agent.py", tmp_path / "stop"
    script.write_text(PAUSED_AGENT)
    token = server.token("agent", "sleepy")
    child = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "home"), server.url, token, str(stop)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert child.stdout is not None
    try:
        assert child.stdout.readline().strip() == "ready"
        for _ in range(3):  # the agent is mid-transaction when paused, and goes on at once
            time.sleep(0.3)
            child.send_signal(signal.SIGSTOP)
            time.sleep(1.6)  # more than stale_after (1 s) + grace (0.5 s)
            child.send_signal(signal.SIGCONT)
        stop.touch()
        out, _ = child.communicate(timeout=30)
    finally:
        child.kill()
    assert out.strip() == "done", out
    assert sum(1 for r in read_log(tmp_path / "home") if r.kind == "step.done") > 10
