"""An agent process SIGKILLed in the middle of shipping, then restarted: the server ends with
every record of its log exactly once, and the chain verifies there."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from agent_saga import Record, build_history, read_log
from plane_testkit import RunningServer

AGENT = """
import sys
from agent_saga import REVERSIBLE, AgentKit

home, url, token, mode = sys.argv[1:5]
kit = AgentKit(home=home, server=url, token=token)

@kit.tool(name="crm.tag", semantics=REVERSIBLE)
def tag(key: str) -> str:
    return key

@kit.tool(name="crm.note", compensate=lambda key: None)
def note(key: str) -> str:
    return key

if mode == "run":
    for i in range(100000):
        with kit.transaction(f"tagging-{i}"):
            for j in range(300):  # about 600 records: more than one shipping batch
                tag(f"{i}-{j}")
            note(f"{i}")
        print("wrote", flush=True)
else:
    kit.close()  # ships what is left before it returns
    print("closed", flush=True)
"""
"""The agent writes a burst of about 600 records, says so, and writes the next: it is killed
right after a burst once the server holds a first batch, so records it wrote were not shipped
yet (a batch holds what was written since the shipper last looked)."""


def _server_tail(server: RunningServer, origin: str) -> int:
    with server.client(server.admin) as client:
        return int(client.get(f"/v1/origins/{origin}").json()["last_seq"])


def test_sigkill_mid_shipping_then_restart_ships_every_record_once(
    server: RunningServer, tmp_path: Path
) -> None:
    token = server.token("agent", "crashy")
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    home = tmp_path / "agent-home"
    run = [sys.executable, str(script), str(home), server.url, token]
    child = subprocess.Popen([*run, "run"], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    deadline = time.monotonic() + 60
    while True:
        assert child.stdout.readline().strip() == "wrote"
        if _server_tail(server, "crashy") > 0:  # shipping is under way
            break
        assert time.monotonic() < deadline
    os.kill(child.pid, signal.SIGKILL)
    child.wait(10)
    child.stdout.close()
    local = list(read_log(home))
    at_kill = _server_tail(server, "crashy")
    print(f"\ncrash: {at_kill} of {local[-1].seq} records shipped when the agent was killed")
    assert at_kill < local[-1].seq  # the kill left records unshipped

    finish = subprocess.run(
        [*run, "finish"], check=False, capture_output=True, text=True, timeout=120
    )
    assert finish.stdout.strip() == "closed", finish.stderr
    local = list(read_log(home))
    assert _server_tail(server, "crashy") == local[-1].seq
    with server.client(server.admin) as client:
        report = client.get("/v1/audit/certify/crashy").json()
        conflicts = client.get("/v1/audit/conflicts", params={"origin": "crashy"}).json()
    assert report["records"] == len(local)  # each seq once (and no more)
    assert not [f for f in report["findings"] if f["check"] == "chain"]
    assert conflicts["conflicts"] == []
    stored = _stored_hashes(server)
    assert stored == [r.hash for r in local]
    _the_list_reads_as_build_history(server, local)


def _the_list_reads_as_build_history(server: RunningServer, local: list[Record]) -> None:
    """The server's saga list (kept batch by batch as records arrive, across the crash) says
    what the core's reading of the whole log says."""
    listed: list[dict[str, Any]] = []
    cursor = None
    with server.client(server.admin) as client:
        while True:
            params: dict[str, str | int] = {"origin": "crashy", "limit": 500}
            if cursor is not None:
                params["cursor"] = cursor
            page = client.get("/v1/sagas", params=params).json()
            listed.extend(page["sagas"])
            cursor = page["next"]
            if cursor is None:
                break
    views = build_history(local).sagas
    assert len(listed) == len(views) >= 2  # each saga spans more than one batch
    by_id = {saga["saga"]: saga for saga in listed}
    for view in views:
        row = by_id[view.id]
        assert (row["name"], row["status"], row["started"], row["ended"]) == (
            view.name, view.status.value, view.started, view.ended,
        )  # fmt: skip
        assert row["tools"] == sorted({step.tool for step in view.steps})


def _stored_hashes(server: RunningServer) -> list[str]:
    import sqlite3

    with sqlite3.connect(server.home / "control-plane.sqlite3") as db:
        rows = db.execute("SELECT seq, hash FROM records WHERE origin = 'crashy' ORDER BY seq")
        pairs = list(rows)
    assert [seq for seq, _ in pairs] == list(range(1, len(pairs) + 1))
    return [str(h) for _, h in pairs]
