"""The gateway serving streamable HTTP (one subprocess for the module), in front of an issue
tracker (stdio) and a payment provider (HTTP), with the package README's configuration.

Each test opens its own client sessions (``mcp.ClientSession`` over streamable HTTP): sessions
are sagas of their own, end cleanly with the client's DELETE, can be bracketed with the saga
tools, ask their user through elicitation, or wait for a terminal approver. The gateway runs
with an 8-second idle timeout: a client that vanishes is rolled back soon, and a loaded
machine's pause between two requests of one session does not end it. The last test stops the
gateway.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from agent_saga import action_digest
from mcp import ClientSession, types
from mcp.client.session import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp_testkit import (
    AGENT_SAGA,
    TEST_DECLARATIONS,
    Ledger,
    eventually,
    http_gateway,
    readme_config,
    run_cli,
    saga_end,
    saga_records,
    start_http_upstream,
    step_sagas,
    stop_process,
    text_of,
    this_user,
    wait_for_text,
)

HTTP = ["--http", "--port", "0", "--idle-timeout", "8"]


@dataclass
class Served:
    url: str
    home: Path
    process: subprocess.Popen[str]
    issues: Ledger
    payments: Ledger

    def status_of(self, saga: str) -> str | None:
        end = saga_end(saga_records(self.home).get(saga, []))
        return str(end["status"]) if end is not None else None

    def issue(self, result: types.CallToolResult) -> int:
        assert result.structured_content is not None, text_of(result)
        return int(result.structured_content["number"])

    def closed(self) -> list[int]:
        return [entry["number"] for entry in self.issues.ops("close_issue")]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("http")
    payments = start_http_upstream("payments", root / "payments.jsonl", root / "payments.err")
    config = root / "gateway.toml"
    text = readme_config(payments.url, root / "issues.jsonl", TEST_DECLARATIONS)
    config.write_text(text.replace('"unix:alice"', f'"{this_user()}"'))
    home, errlog = root / "home", root / "gateway.err"
    with errlog.open("w") as err:
        process = subprocess.Popen(
            [AGENT_SAGA, "--home", str(home), "mcp", "serve", "--config", str(config), *HTTP],
            stdout=subprocess.DEVNULL,
            stderr=err,
            text=True,
        )
    try:
        url = wait_for_text(errlog, r"serving (http://\S+)", process, 60)
        yield Served(url, home, process, Ledger(root / "issues.jsonl"), payments.ledger)
    finally:
        stop_process(process)
        payments.stop()


def test_a_session_that_ends_with_its_delete_commits(served: Served) -> None:
    async def run() -> int:
        async with http_gateway(served.url) as client:
            return served.issue(await client.call_tool("create_issue", {"title": "kept"}))

    number = asyncio.run(run())
    [saga] = step_sagas(served.home, "create_issue", title="kept")
    assert served.status_of(saga) == "committed"
    assert number not in served.closed()


def test_two_sessions_are_two_sagas(served: Served) -> None:
    async def run() -> tuple[int, int, types.CallToolResult]:
        async with http_gateway(served.url) as one, http_gateway(served.url) as two:
            first = served.issue(await one.call_tool("create_issue", {"title": "one"}))
            second = served.issue(await two.call_tool("create_issue", {"title": "two"}))
            failed = await one.call_tool("pay_fail", {"reason": "only session one"})
        return first, second, failed

    first, second, failed = asyncio.run(run())
    assert failed.is_error
    assert first in served.closed()
    assert second not in served.closed()
    [saga_one] = step_sagas(served.home, "create_issue", title="one")
    [saga_two] = step_sagas(served.home, "create_issue", title="two")
    assert served.status_of(saga_one) == "rolled_back"
    assert served.status_of(saga_two) == "committed"


def test_a_call_that_fails_without_a_result_rolls_the_saga_back(served: Served) -> None:
    async def run() -> tuple[int, types.CallToolResult]:
        async with http_gateway(served.url) as client:
            number = served.issue(await client.call_tool("create_issue", {"title": "crash"}))
            return number, await client.call_tool("pay_crash", {"reason": "disk full"})

    number, crashed = asyncio.run(run())
    assert crashed.is_error
    assert "pay_crash failed: MCPError: provider crashed: disk full" in text_of(crashed)
    assert "compensated #1 create_issue" in text_of(crashed)
    assert number in served.closed()
    [saga] = step_sagas(served.home, "create_issue", title="crash")
    assert served.status_of(saga) == "rolled_back"


def test_the_model_brackets_its_work_with_the_saga_tools(served: Served) -> None:
    async def run() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with http_gateway(served.url) as client:
            out["early"] = served.issue(await client.call_tool("create_issue", {"title": "early"}))
            out["begin"] = await client.call_tool("saga_begin", {"name": "triage"})
            out["again"] = await client.call_tool("saga_begin", {})
            out["inside"] = served.issue(await client.call_tool("create_issue", {"title": "in"}))
            out["rollback"] = await client.call_tool("saga_rollback", {"reason": "wrong repo"})
            out["commit"] = await client.call_tool("saga_commit", {})
            out["status"] = await client.call_tool("saga_status", {})
        return out

    out = asyncio.run(run())
    begin = out["begin"].structured_content
    assert begin["ended"]["status"] == "committed"  # the session's earlier work committed
    assert out["again"].is_error
    assert "already open" in text_of(out["again"])
    assert out["rollback"].structured_content["status"] == "rolled_back"
    assert out["rollback"].structured_content["compensated"] == [1]
    assert out["inside"] in served.closed()
    assert out["early"] not in served.closed()
    assert out["commit"].is_error
    assert text_of(out["commit"]) == "saga_commit: no saga is open"
    assert out["status"].structured_content["last"]["saga"] == begin["saga"]
    [explicit] = step_sagas(served.home, "create_issue", title="in")
    assert explicit == begin["saga"]
    assert saga_records(served.home)[explicit][0].data["name"] == "triage"


def test_an_irreversible_call_asks_the_user_through_elicitation(served: Served) -> None:
    asked: list[types.ElicitRequestParams] = []

    async def approve(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="accept", content={"approve": True})

    async def run() -> tuple[int, types.CallToolResult]:
        async with http_gateway(served.url, elicitation_callback=approve) as client:
            number = served.issue(await client.call_tool("create_issue", {"title": "label me"}))
            labelled = await client.call_tool("add_label", {"number": number, "label": "bug"})
        return number, labelled

    number, labelled = asyncio.run(run())
    assert not labelled.is_error, text_of(labelled)
    assert [(e["number"], e["label"]) for e in served.issues.ops("add_label")].count(
        (number, "bug")
    ) == 1
    assert len(asked) == 1
    assert isinstance(asked[0], types.ElicitRequestFormParams)
    assert "Approve add_label (irreversible)?" in asked[0].message
    assert f'"number": {number}' in asked[0].message
    [saga] = step_sagas(served.home, "add_label", number=number)
    records = saga_records(served.home)[saga]
    digest = action_digest("add_label", "irreversible", {"number": number, "label": "bug"})
    requested = [r.data for r in records if r.kind == "approval.requested"]
    decided = [r.data for r in records if r.kind == "approval.decided"]
    assert [r["digest"] for r in requested] == [digest]
    assert [(d["decision"], d["digest"], d["by"]) for d in decided] == [
        ("approved", digest, ["mcp:client"])
    ]
    assert digest[:16] in asked[0].message


def test_a_declined_elicitation_refuses_the_call(served: Served) -> None:
    async def decline(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        return types.ElicitResult(action="decline")

    async def run() -> types.CallToolResult:
        async with http_gateway(served.url, elicitation_callback=decline) as client:
            return await client.call_tool("add_label", {"number": 1, "label": "declined"})

    refused = asyncio.run(run())
    assert refused.is_error
    assert "refused and did not run: approval:" in text_of(refused)
    assert "denied" in text_of(refused)
    assert [e for e in served.issues.ops("add_label") if e["label"] == "declined"] == []


def test_without_elicitation_a_terminal_approver_decides(served: Served) -> None:
    def pending() -> str | None:
        for records in saga_records(served.home).values():
            for record in records:
                args = record.data.get("args")
                if record.kind != "approval.requested" or not isinstance(args, dict):
                    continue
                if args.get("label") == "from-terminal":
                    return str(record.data["request"])
        return None

    async def run() -> tuple[types.CallToolResult, subprocess.CompletedProcess[str]]:
        async with http_gateway(served.url) as client:
            call = asyncio.create_task(
                client.call_tool("add_label", {"number": 1, "label": "from-terminal"})
            )
            request = await eventually(pending)
            voted = await asyncio.to_thread(run_cli, served.home, "approve", request)
            return await call, voted

    result, voted = asyncio.run(run())
    assert voted.returncode == 0, voted.stdout + voted.stderr
    assert not result.is_error, text_of(result)
    assert [e for e in served.issues.ops("add_label") if e["label"] == "from-terminal"] != []


def test_a_client_that_vanishes_is_rolled_back_after_the_idle_timeout(served: Served) -> None:
    async def run() -> int:
        async with (
            streamable_http_client(served.url, terminate_on_close=False) as (read, write),
            ClientSession(read, write) as client,
        ):
            await client.initialize()
            return served.issue(await client.call_tool("create_issue", {"title": "vanished"}))

    number = asyncio.run(run())
    assert number not in served.closed()
    asyncio.run(eventually(lambda: number in served.closed(), timeout=40))
    [saga] = step_sagas(served.home, "create_issue", title="vanished")
    # The compensation's effect lands before the saga's end record is written: wait for both.
    asyncio.run(eventually(lambda: saga_end(saga_records(served.home)[saga]) is not None))
    end = saga_end(saga_records(served.home)[saga])
    assert end is not None
    assert end["status"] == "rolled_back"
    assert "idle for 8 s" in str(end["cause"])


def test_a_request_without_a_session_is_a_saga_of_its_own(served: Served) -> None:
    """The 2026-07-28 protocol has no sessions: each call commits (or rolls back) by itself."""

    async def run() -> tuple[list[str], types.CallToolResult, types.CallToolResult]:
        async with (
            streamable_http_client(served.url) as (read, write),
            ClientSession(read, write) as client,
        ):
            discovered = await client.discover()
            made = await client.call_tool("create_issue", {"title": "sessionless"})
            begin = await client.call_tool("saga_begin", {})
        return discovered.supported_versions, made, begin

    versions, made, begin = asyncio.run(run())
    assert versions == ["2026-07-28"]
    assert not made.is_error, text_of(made)
    [saga] = step_sagas(served.home, "create_issue", title="sessionless")
    assert served.status_of(saga) == "committed"
    assert begin.is_error
    assert "saga_begin needs a client session" in text_of(begin)


def test_stopping_the_gateway_rolls_back_the_open_sessions(served: Served) -> None:
    """Last in the module: it stops the module's gateway."""

    async def run() -> int:
        async with http_gateway(served.url) as client:
            number = served.issue(await client.call_tool("create_issue", {"title": "open"}))
            served.process.send_signal(signal.SIGTERM)
            await asyncio.to_thread(served.process.wait, 30)
            return number

    try:
        number = asyncio.run(run())
    except BaseException:  # the client may complain that its server went away
        number = max(e["number"] for e in served.issues.ops("create_issue"))
    assert served.process.returncode == 0
    assert number in served.closed()
    [saga] = step_sagas(served.home, "create_issue", title="open")
    assert served.status_of(saga) == "rolled_back"
    verified = run_cli(served.home, "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
