"""Agents against a real control plane: shipping, sagas, approvals, budgets, the kill switch,
audit exports, and what the manifest and status say. Tests taking ``plane`` run twice: against
the SQLite server and against a replica on the real PostgreSQL."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_saga import (
    IRREVERSIBLE,
    AgentKit,
    Budget,
    ConfigurationError,
    GateRefused,
    HaltedError,
    SagaRolledBack,
    read_log,
)
from agent_saga.proofs import NoteVerifier, verify_bundle
from plane_testkit import RunningServer, free_port


def wait_until(check: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


OPENED: list[AgentKit] = []


@pytest.fixture(autouse=True)
def _close_kits() -> Iterator[None]:
    """Every kit a test opened is closed after it, also when the test failed (closing twice
    is harmless)."""
    yield
    while OPENED:
        OPENED.pop().close()


def agent_kit(server: RunningServer, home: Path, origin: str, **kwargs: Any) -> AgentKit:
    token = server.token("agent", origin)
    kit = AgentKit(home=home, server=server.url, token=token, **kwargs)
    OPENED.append(kit)
    return kit


def shipped(server: RunningServer, origin: str) -> int:
    with server.client(server.admin) as client:
        return int(client.get(f"/v1/origins/{origin}").json()["last_seq"])


def test_records_ship_sagas_list_and_a_saga_reads_as_replay_tells_it(
    plane: RunningServer, tmp_path: Path
) -> None:
    kit = agent_kit(plane, tmp_path / "a", "ship-a")

    @kit.tool(name="crm.note", compensate=lambda text: None)
    def note(text: str) -> str:
        return text.upper()

    for i in range(7):
        with kit.transaction(f"batch-{i}"):
            note(f"n{i}")
    try:
        with kit.transaction("broken"):
            note("x")
            raise RuntimeError("downstream failed")
    except SagaRolledBack:
        pass
    local = list(read_log(tmp_path / "a"))
    wait_until(lambda: shipped(plane, "ship-a") == local[-1].seq)
    with plane.client(plane.admin) as client:
        page1 = client.get("/v1/sagas", params={"origin": "ship-a", "limit": 5}).json()
        page2 = client.get(
            "/v1/sagas", params={"origin": "ship-a", "limit": 5, "cursor": page1["next"]}
        ).json()
        names = [s["name"] for s in page1["sagas"] + page2["sagas"]]
        assert len(names) == 8
        assert len(set(names)) == 8
        assert page2["next"] is None
        failed = client.get("/v1/sagas", params={"origin": "ship-a", "status": "rolled_back"})
        [broken] = failed.json()["sagas"]
        assert broken["name"] == "broken"
        assert broken["tools"] == ["crm.note"]
        none = client.get("/v1/sagas", params={"origin": "ship-a", "tool": "other.tool"})
        assert none.json()["sagas"] == []
        starts = sorted({s["started"] for s in page1["sagas"] + page2["sagas"]})
        middle = starts[len(starts) // 2]
        later = client.get("/v1/sagas", params={"origin": "ship-a", "since": middle}).json()
        earlier = client.get("/v1/sagas", params={"origin": "ship-a", "until": middle}).json()
        assert all(s["started"] >= middle for s in later["sagas"])
        assert all(s["started"] < middle for s in earlier["sagas"])
        assert len(later["sagas"]) + len(earlier["sagas"]) == 8
        detail = client.get(f"/v1/sagas/ship-a/{broken['saga']}").json()
        step = detail["saga"]["steps"][0]
        assert (step["tool"], step["outcome"], step["compensation_state"]) == (
            "crm.note",
            "done",
            "compensated",
        )
        assert detail["saga"]["cause"]["message"] == "downstream failed"
        assert client.get("/v1/sagas", params={"limit": 501}).status_code == 400
    kit.close()


def test_approval_quorum_identity_single_use_and_the_decision_reaches_the_agent(
    plane: RunningServer, tmp_path: Path
) -> None:
    alice = plane.token("approver", "alice")
    bob = plane.token("approver", "bob")
    from agent_saga import RequireApproval, Rule, ToolCall  # noqa: F401

    class TwoPeople:
        name = "two_people"

        def evaluate(self, call: ToolCall) -> RequireApproval:
            return RequireApproval(self.name, "wires need two people", quorum=2)

    kit = agent_kit(plane, tmp_path / "b", "approve-b", rules=[TwoPeople()])

    @kit.tool(name="bank.wire", semantics=IRREVERSIBLE)
    def wire(to: str, amount: int) -> str:
        return f"{amount} to {to}"

    outcome: list[str] = []

    def agent() -> None:
        with kit.transaction("payout"):
            outcome.append(wire("acme", 9000))

    thread = threading.Thread(target=agent)
    thread.start()
    with plane.client(alice) as a, plane.client(bob) as b:
        pending = a.get("/v1/approvals", params={"status": "pending", "wait": 20}).json()
        [request] = [r for r in pending["approvals"] if r["origin"] == "approve-b"]
        assert request["args"] == {"to": "acme", "amount": 9000}
        assert len(request["digest"]) == 64
        assert request["quorum"] == 2
        path = f"/v1/approvals/{request['id']}/votes"
        named = a.post(path, json={"decision": "approve", "approver": "bob"})
        assert named.status_code == 400  # the body cannot name the approver
        first = a.post(path, json={"decision": "approve"}).json()
        assert first["status"] == "pending"
        assert [v["approver"] for v in first["votes"]] == ["alice"]
        assert a.post(path, json={"decision": "approve"}).status_code == 409  # once each
        assert b.post(path, json={"decision": "approve"}).json()["status"] == "approved"
        assert b.post(path, json={"decision": "deny"}).status_code == 409  # decided once
    thread.join(20)
    assert outcome == ["9000 to acme"]
    decided = [r.data for r in read_log(tmp_path / "b") if r.kind == "approval.decided"]
    assert decided[0]["decision"] == "approved"
    assert decided[0]["by"] == ["alice", "bob"]
    wait_until(lambda: _outcome(plane, request["id"]) == "approved")
    kit.close()


def _outcome(server: RunningServer, request_id: str) -> str | None:
    with server.client(server.admin) as client:
        return client.get(f"/v1/approvals/{request_id}").json()["outcome"]  # type: ignore[no-any-return]


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


def test_checkpoints_disclosure_and_certify_from_the_server(
    plane: RunningServer, tmp_path: Path
) -> None:
    kit = agent_kit(plane, tmp_path / "e", "audit-e")

    @kit.tool(name="files.put", compensate=lambda path: None)
    def put(path: str) -> str:
        return path

    with kit.transaction("upload"):
        put("/a")
    kit.checkpoint()
    seq = list(read_log(tmp_path / "e"))[-1].seq
    wait_until(lambda: _checkpoint_size(plane, "audit-e") == seq)
    with plane.client(plane.admin) as admin:
        sagas = admin.get("/v1/sagas", params={"origin": "audit-e"}).json()["sagas"]
        bundle = admin.get(f"/v1/audit/sagas/audit-e/{sagas[0]['saga']}/disclosure").json()
        report = admin.get("/v1/audit/certify/audit-e").json()
        checkpoints = admin.get("/v1/audit/checkpoints", params={"origin": "audit-e"}).json()
    key = NoteVerifier.parse((tmp_path / "e" / "keys" / "checkpoint.pub").read_text())
    proven = verify_bundle(json.loads(json.dumps(bundle)), [key])
    assert proven.saga == sagas[0]["saga"]
    assert len(proven.records) >= 3
    assert report["ok"]
    assert report["counts"]["committed"] == 1
    assert checkpoints["checkpoints"][0]["size"] == seq
    first_note = checkpoints["checkpoints"][0]["note"]
    with kit.transaction("upload more"):
        put("/b")
    kit.checkpoint()  # shipped with a consistency proof from the first
    later = list(read_log(tmp_path / "e"))[-1].seq
    wait_until(lambda: _checkpoint_size(plane, "audit-e") == later)
    kit.close()
    token = plane.token("agent", "audit-e")
    with plane.client(token) as agent, plane.client(plane.admin) as admin:
        stale = agent.post(
            "/v1/origins/audit-e/checkpoints", json={"note": first_note, "proof": []}
        )
        assert stale.status_code == 409  # not an extension of the latest: kept as evidence
        kept = admin.get("/v1/audit/conflicts", params={"origin": "audit-e"}).json()
        assert [c["what"] for c in kept["conflicts"]] == ["checkpoint"]
        sizes = [c["size"] for c in admin.get("/v1/audit/checkpoints").json()["checkpoints"]]
        assert later in sizes
        assert seq in sizes


def test_an_expired_request_takes_no_vote_and_ready_names_the_database(
    plane: RunningServer,
) -> None:
    request = {
        "id": f"apr-{os.getpid():08x}{int(time.time()) % 2**32:08x}", "saga": "s", "ordinal": 1,
        "tool": "db.drop", "semantics": "irreversible", "digest": "cd" * 32, "args": {},
        "rule": "irreversible", "reason": "r", "approvers": ["*"], "quorum": 1,
        "expires_at": time.time() - 1,
    }  # fmt: skip
    agent = plane.token("agent", "expiry-agent")
    voter = plane.token("approver", "late-voter")
    with plane.client(agent) as client, plane.client(voter) as approver:
        created = client.post("/v1/approvals", json=request)
        assert created.status_code == 201
        assert created.json()["status"] == "expired"
        late = approver.post(f"/v1/approvals/{request['id']}/votes", json={"decision": "approve"})
        assert late.status_code == 409
        assert approver.get(f"/v1/approvals/{request['id']}").json()["votes"] == []
        ready = client.get("/v1/ready").json()
    assert ready["ready"]
    on_sqlite = (plane.home / "control-plane.sqlite3").exists()
    assert ready["database"] == ("sqlite" if on_sqlite else "postgres")


def _checkpoint_size(server: RunningServer, origin: str) -> int:
    with server.client(server.admin) as client:
        return int(client.get(f"/v1/origins/{origin}").json()["checkpoint_size"])


def test_a_conflicting_record_is_a_409_kept_as_evidence(
    plane: RunningServer, tmp_path: Path
) -> None:
    kit = agent_kit(plane, tmp_path / "f", "conflict-f")
    with kit.transaction("one"):
        pass
    record = next(iter(read_log(tmp_path / "f"))).to_json()
    wait_until(lambda: shipped(plane, "conflict-f") >= 1)
    kit.close()
    token = plane.token("agent", "conflict-f")
    with plane.client(token) as agent:
        again = agent.post("/v1/origins/conflict-f/records", json={"records": [record]})
        assert again.status_code == 200
        assert again.json()["duplicates"] == 1
        forged = {**record, "ts": record["ts"] + 1}
        refused = agent.post("/v1/origins/conflict-f/records", json={"records": [forged]})
        assert refused.status_code == 409
        other = agent.post("/v1/origins/someone-else/records", json={"records": [record]})
        assert other.status_code == 403
    with plane.client(plane.admin) as admin:
        kept = admin.get("/v1/audit/conflicts", params={"origin": "conflict-f"}).json()
        assert kept["conflicts"][-1]["body"]["records"][0]["ts"] == record["ts"] + 1


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
