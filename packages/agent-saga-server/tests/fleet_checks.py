"""Checks of an agent against a real control plane, run by ``test_fleet`` on the SQLite server
and by ``test_replicas`` on a PostgreSQL replica: shipping and the saga list, approvals, audit
exports, expiry and readiness, conflicting records. Each kit a check opens is in ``OPENED``;
:func:`close_opened` closes them (also after a failure)."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from agent_saga import IRREVERSIBLE, AgentKit, SagaRolledBack, read_log
from agent_saga.proofs import NoteVerifier, verify_bundle
from plane_testkit import RunningServer


def wait_until(check: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


OPENED: list[AgentKit] = []


def agent_kit(server: RunningServer, home: Path, origin: str, **kwargs: Any) -> AgentKit:
    token = server.token("agent", origin)
    kit = AgentKit(home=home, server=server.url, token=token, **kwargs)
    OPENED.append(kit)
    return kit


def shipped(server: RunningServer, origin: str) -> int:
    with server.client(server.admin) as client:
        return int(client.get(f"/v1/origins/{origin}").json()["last_seq"])


def _outcome(server: RunningServer, request_id: str) -> str | None:
    with server.client(server.admin) as client:
        return client.get(f"/v1/approvals/{request_id}").json()["outcome"]  # type: ignore[no-any-return]


def _checkpoint_size(server: RunningServer, origin: str) -> int:
    with server.client(server.admin) as client:
        return int(client.get(f"/v1/origins/{origin}").json()["checkpoint_size"])


def close_opened() -> None:
    """Close every kit a check opened (closing twice is harmless)."""
    while OPENED:
        OPENED.pop().close()


def records_ship_sagas_list_and_a_saga_reads_as_replay_tells_it(
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


def approval_quorum_identity_single_use_and_the_decision_reaches_the_agent(
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


def checkpoints_disclosure_and_certify_from_the_server(
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


def an_expired_request_takes_no_vote_and_ready_names_the_database(
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


def a_conflicting_record_is_a_409_kept_as_evidence(plane: RunningServer, tmp_path: Path) -> None:
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
