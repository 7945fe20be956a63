"""How a waiting read of an approval learns its decision (a real SQLite control plane): the
vote's answer is handed to the reads it wakes, which must answer exactly what the database
holds, and a read that was not waiting still reads the database; a vote cast on the
dashboard wakes the waiting read as the API's vote does."""

from __future__ import annotations

import re
import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from agent_saga import IRREVERSIBLE, AgentKit
from agent_saga_server.api.app import create_app
from agent_saga_server.client.approvals import ServerApprovals
from agent_saga_server.dashboard import mint_login
from agent_saga_server.settings import ServerSettings
from agent_saga_server.store import tokens
from agent_saga_server.store.db import Database, SqliteDatabase
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


@pytest.fixture
def slow_looking_plane(tmp_path: Path) -> Iterator[tuple[str, Database]]:
    """A control plane under uvicorn on 127.0.0.1 whose hub looks at the database only every
    60 s: a waiter it wakes sooner was woken by the change itself."""
    db = SqliteDatabase(tmp_path / "plane.sqlite3")
    app = create_app(db, ServerSettings(watch_interval=60.0))
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    served = uvicorn.Server(config)
    thread = threading.Thread(target=served.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not served.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        assert thread.is_alive(), "uvicorn stopped"
        time.sleep(0.01)
    port = served.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", db
    finally:
        served.should_exit = True
        thread.join(30)
        db.close()


def test_a_vote_from_the_dashboard_wakes_the_waiting_agent_at_once(
    slow_looking_plane: tuple[str, Database],
) -> None:
    url, db = slow_looking_plane
    agent, _ = tokens.issue(db, "agent", "wakeups-e", origin="wakeups-e")
    body = _request("payout")
    answers: list[tuple[float, dict[str, Any]]] = []
    headers = {"Authorization": f"Bearer {agent}"}
    with httpx.Client(base_url=url, headers=headers, timeout=30, trust_env=False) as client:
        assert client.post("/v1/approvals", json=body).status_code == 201

        def wait_for_decision() -> None:
            answer = client.get(f"/v1/approvals/{body['id']}", params={"wait": 20})
            answers.append((time.monotonic(), answer.json()))

        waiter = threading.Thread(target=wait_for_decision)
        waiter.start()
        with httpx.Client(
            base_url=url, timeout=30, trust_env=False, follow_redirects=True
        ) as browser:
            signed_in = browser.get(f"/ui/login?token={mint_login(db, 'fay', 'approver')}")
            assert signed_in.status_code == 200
            queue = browser.get("/ui/approvals").text
            csrf = re.search(r'name="csrf" value="([^"]+)"', queue)
            assert csrf is not None
            assert body["id"] in queue
            time.sleep(0.3)  # the agent's read is waiting on the server
            form = {"csrf": csrf.group(1), "decision": "approve", "note": "ok"}
            voted = browser.post(f"/ui/approvals/{body['id']}", data=form)
            voted_at = time.monotonic()
        waiter.join(30)
    assert voted.status_code == 200
    assert "approved" in str(voted.url)
    assert len(answers) == 1
    answered_at, answer = answers[0]
    assert answer["status"] == "approved"
    assert [(v["approver"], v["note"]) for v in answer["votes"]] == [("fay", "ok")]
    assert answered_at - voted_at < 10  # not the hub's look, 60 s away


def test_a_request_the_server_lost_is_posted_again_and_decided(
    slow_looking_plane: tuple[str, Database], tmp_path: Path
) -> None:
    """A request is committed without waiting for the server's disk: a host crash may lose it
    (here: its row deleted). The agent's long-poll then meets a 404 and posts it again."""
    url, db = slow_looking_plane
    agent, _ = tokens.issue(db, "agent", "wakeups-f", origin="wakeups-f")
    other, _ = tokens.issue(db, "agent", "wakeups-g", origin="wakeups-g")
    approver, _ = tokens.issue(db, "approver", "gus")
    kit = AgentKit(home=tmp_path / "agent", server=url, token=agent)
    approvals = kit.runtime.approvals
    assert isinstance(approvals, ServerApprovals)
    approvals.expires_after = 20.0  # a failure ends, refused, within seconds
    wired: list[int] = []

    @kit.tool(name="bank.wire", semantics=IRREVERSIBLE)
    def wire(amount: int) -> int:
        wired.append(amount)
        return amount

    def lose_then_approve() -> None:
        headers = {"Authorization": f"Bearer {approver}"}
        with httpx.Client(base_url=url, headers=headers, timeout=30, trust_env=False) as bot:
            params: dict[str, str | float] = {"status": "pending", "wait": 10}
            found = bot.get("/v1/approvals", params=params).json()["approvals"]
            lost = found[0]["id"]
            time.sleep(0.3)  # the agent's read is waiting on the server
            with db.transaction() as tx:
                tx.execute("DELETE FROM approvals WHERE id = ?", (lost,))
            unrelated = {**_request("refund"), "approvers": ["nobody"]}
            with httpx.Client(
                base_url=url, headers={"Authorization": f"Bearer {other}"}, trust_env=False
            ) as waking:  # any change wakes the agent's read, which finds no request
                assert waking.post("/v1/approvals", json=unrelated).status_code == 201
            deadline = time.monotonic() + 15
            while bot.get(f"/v1/approvals/{lost}").status_code == 404:
                assert time.monotonic() < deadline
                time.sleep(0.02)
            vote = bot.post(f"/v1/approvals/{lost}/votes", json={"decision": "approve"})
            outcome.append(vote.json()["status"])

    outcome: list[str] = []
    bot = threading.Thread(target=lose_then_approve)
    bot.start()
    try:
        with kit.transaction("payout"):
            wire(5)
    finally:
        bot.join(30)
        kit.close()
    assert outcome == ["approved"]
    assert wired == [5]


def test_the_servers_approvers_are_read_again_once_the_list_is_older_than_allowed(
    slow_looking_plane: tuple[str, Database], tmp_path: Path
) -> None:
    url, db = slow_looking_plane
    agent, _ = tokens.issue(db, "agent", "wakeups-h", origin="wakeups-h")
    approver, _ = tokens.issue(db, "approver", "hal")
    kit = AgentKit(home=tmp_path / "agent", server=url, token=agent)
    approvals = kit.runtime.approvals
    assert isinstance(approvals, ServerApprovals)
    approvals.approvers_fresh = 60.0
    asked: list[list[str]] = []
    stop = threading.Event()

    @kit.tool(name="bank.wire", semantics=IRREVERSIBLE)
    def wire(amount: int) -> int:
        return amount

    def approve_all() -> None:
        headers = {"Authorization": f"Bearer {approver}"}
        with httpx.Client(base_url=url, headers=headers, timeout=30, trust_env=False) as bot:
            while not stop.is_set():
                params: dict[str, str | float] = {"status": "pending", "wait": 0.5}
                for found in bot.get("/v1/approvals", params=params).json()["approvals"]:
                    asked.append(found["approvers"])
                    bot.post(f"/v1/approvals/{found['id']}/votes", json={"decision": "approve"})

    bot = threading.Thread(target=approve_all)
    bot.start()
    try:
        with kit.transaction("first"):
            wire(1)
        tokens.issue(db, "approver", "ida")
        with kit.transaction("within the time the list is reused"):
            wire(2)
        approvals.approvers_fresh = 0.0
        with kit.transaction("after it"):
            wire(3)
    finally:
        stop.set()
        bot.join(30)
        kit.close()
    assert asked == [["hal"], ["hal"], ["hal", "ida"]]
