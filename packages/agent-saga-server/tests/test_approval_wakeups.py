"""How a waiting read of an approval learns its decision (a real SQLite control plane): the
vote's answer is handed to the reads it wakes, which must answer exactly what the database
holds, and a read that was not waiting still reads the database."""

from __future__ import annotations

import secrets
import threading
import time
from typing import Any

from plane_testkit import RunningServer


def _request(origin_saga: str) -> dict[str, Any]:
    return {
        "id": f"apr-{secrets.token_hex(8)}", "saga": origin_saga, "ordinal": 1,
        "tool": "bank.wire", "semantics": "irreversible", "digest": "ab" * 32,
        "args": {"amount": 5, "memo": "caf\u00e9", "big": 2**70, "tiny": 1e-300},
        "rule": "wires need a human", "reason": "irreversible", "approvers": ["*"],
        "quorum": 1, "expires_at": time.time() + 60,
    }  # fmt: skip


def test_a_waiting_read_answers_the_decision_as_the_database_holds_it(
    server: RunningServer,
) -> None:
    agent = server.token("agent", "wakeups-a")
    approver = server.token("approver", "erin")
    body = _request("payout")
    answers: list[dict[str, Any]] = []
    with server.client(agent) as client:
        created = client.post("/v1/approvals", json=body)
        assert created.status_code == 201
        assert created.json()["status"] == "pending"
        assert created.json()["args"] == body["args"]

        def wait_for_decision() -> None:
            path = f"/v1/approvals/{body['id']}"
            answers.append(client.get(path, params={"wait": 10}).json())

        waiter = threading.Thread(target=wait_for_decision)
        waiter.start()
        time.sleep(0.3)  # the read is waiting on the server
        with server.client(approver) as deciding:
            voted = deciding.post(f"/v1/approvals/{body['id']}/votes", json={"decision": "approve"})
        waiter.join(15)
        stored = client.get(f"/v1/approvals/{body['id']}").json()
    assert voted.status_code == 200
    assert len(answers) == 1
    assert answers[0]["status"] == "approved"
    assert [(v["approver"], v["decision"]) for v in answers[0]["votes"]] == [("erin", "approve")]
    assert answers[0] == stored == voted.json()


def test_an_agent_waiting_on_another_origins_request_is_refused_before_any_wait(
    server: RunningServer,
) -> None:
    owner = server.token("agent", "wakeups-b")
    other = server.token("agent", "wakeups-c")
    body = _request("refund")
    with server.client(owner) as client:
        assert client.post("/v1/approvals", json=body).status_code == 201
    with server.client(other) as client:
        start = time.monotonic()
        answer = client.get(f"/v1/approvals/{body['id']}", params={"wait": 5})
    assert answer.status_code == 403
    assert time.monotonic() - start < 4
    # the session's server is shared: leave no pending request in other tests' queues
    with server.client(server.token("approver", "wakeups-d")) as deciding:
        closed = deciding.post(f"/v1/approvals/{body['id']}/votes", json={"decision": "deny"})
    assert closed.json()["status"] == "denied"
