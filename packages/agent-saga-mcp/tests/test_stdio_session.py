"""One client session with the gateway run as a stdio subprocess (as an MCP client starts it),
in front of an issue tracker (stdio) and a payment provider (streamable HTTP).

The session, run once for the module: list the tools; open two issues and make a charge; make a
charge above the cap (refused); call a hidden tool by name; call a tool that fails (the session's
saga is rolled back); open a third issue and close the session cleanly (committed). The tests
then read the upstreams' ledgers, the log, ``agent-saga verify`` and ``agent-saga certify``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from agent_saga_mcp import load_config
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp_testkit import (
    TEST_DECLARATIONS,
    HttpUpstream,
    Ledger,
    http_gateway,
    readme_config,
    run_cli,
    saga_end,
    saga_records,
    start_http_upstream,
    stdio_gateway,
    text_of,
)


@dataclass
class Session:
    """What the module's session saw and left behind."""

    home: Path
    issues: Ledger
    payments: Ledger
    tools: list[types.Tool] = field(default_factory=list)
    upstream_tools: dict[str, list[types.Tool]] = field(default_factory=dict)
    results: dict[str, types.CallToolResult] = field(default_factory=dict)
    verify: str = ""
    verify_code: int = -1
    certify: str = ""
    certify_code: int = -1


async def _upstream_tools(config: Path, payments_url: str) -> dict[str, list[types.Tool]]:
    """The tools each upstream lists when asked directly (no gateway)."""
    issues = load_config(config).upstreams["issues"]
    assert issues.command is not None
    params = StdioServerParameters(command=issues.command, args=list(issues.args))
    out: dict[str, list[types.Tool]] = {}
    async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
        await client.initialize()
        out["issues"] = (await client.list_tools()).tools
    async with http_gateway(payments_url) as client:
        out["payments"] = (await client.list_tools()).tools
    return out


async def _session(run: Session, config: Path, errlog: Any) -> None:
    async with stdio_gateway(run.home, config, errlog) as gateway:
        run.tools = (await gateway.list_tools()).tools
        calls: list[tuple[str, str, dict[str, Any]]] = [
            ("first", "create_issue", {"title": "first"}),
            ("second", "create_issue", {"title": "second"}),
            ("charge", "pay_charge", {"amount": 40.0, "card": "visa-4242"}),
            ("over_cap", "pay_charge", {"amount": 900.0, "card": "visa-4242"}),
            ("bad_type", "pay_charge", {"amount": "forty", "card": "visa-4242"}),
            ("hidden", "delete_repo", {"confirm": True}),
            ("status_before", "saga_status", {}),
            ("fail", "pay_fail", {"reason": "card network down"}),
            ("status_after", "saga_status", {}),
            ("third", "create_issue", {"title": "third"}),
        ]
        for label, tool, arguments in calls:
            run.results[label] = await gateway.call_tool(tool, arguments)


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Session:
    root = tmp_path_factory.mktemp("stdio")
    payments: HttpUpstream = start_http_upstream(
        "payments", root / "payments.jsonl", root / "payments.err"
    )
    try:
        config = root / "gateway.toml"
        config.write_text(readme_config(payments.url, root / "issues.jsonl", TEST_DECLARATIONS))
        run = Session(root / "home", Ledger(root / "issues.jsonl"), payments.ledger)
        with (root / "gateway.err").open("w") as errlog:
            asyncio.run(_session(run, config, errlog))
        run.upstream_tools = asyncio.run(_upstream_tools(config, payments.url))
    finally:
        payments.stop()
    verified = run_cli(run.home, "verify")
    run.verify, run.verify_code = verified.stdout + verified.stderr, verified.returncode
    certified = run_cli(run.home, "certify")
    run.certify, run.certify_code = certified.stdout + certified.stderr, certified.returncode
    return run


def test_tools_are_listed_with_the_upstreams_names_descriptions_and_schemas(
    session: Session,
) -> None:
    listed = {tool.name: tool for tool in session.tools}
    compared = 0
    for upstream, prefix in (("issues", ""), ("payments", "pay_")):
        for tool in session.upstream_tools[upstream]:
            if tool.name == "delete_repo":
                continue
            mine = listed[prefix + tool.name]
            assert mine.description == tool.description
            assert mine.input_schema == tool.input_schema
            assert mine.output_schema == tool.output_schema
            assert mine.model_dump(exclude={"name"}) == tool.model_dump(exclude={"name"})
            compared += 1
    assert compared == 4 + 6
    gateway_tools = {"saga_begin", "saga_commit", "saga_rollback", "saga_status"}
    assert (
        set(listed)
        - {f"pay_{t.name}" for t in session.upstream_tools["payments"]}
        - {t.name for t in session.upstream_tools["issues"]}
        == gateway_tools
    )


def test_a_hidden_tool_is_not_listed_and_cannot_be_called_by_name(session: Session) -> None:
    assert "delete_repo" not in {tool.name for tool in session.tools}
    result = session.results["hidden"]
    assert result.is_error
    assert text_of(result) == "Unknown tool: delete_repo"
    assert session.issues.ops("delete_repo") == []


def test_a_refusal_is_a_tool_result_with_the_rule_and_its_reason(session: Session) -> None:
    over = session.results["over_cap"]
    assert over.is_error
    assert "max_value: amount=900.0 exceeds the cap of 500" in text_of(over)
    assert over.structured_content == {
        "refused": {
            "tool": "pay_charge",
            "rule": "max_value",
            "reason": "amount=900.0 exceeds the cap of 500",
        }
    }
    bad = session.results["bad_type"]
    assert bad.is_error
    assert "input_schema: amount: 'forty' is not of type 'number'" in text_of(bad)
    assert [c["amount"] for c in session.payments.ops("charge")] == [40.0]
    refused = [
        r.data for rs in saga_records(session.home).values() for r in rs if r.kind == "gate.refused"
    ]
    assert [(r["tool"], r["rule"]) for r in refused] == [
        ("pay_charge", "max_value"),
        ("pay_charge", "input_schema"),
    ]


def test_a_failing_call_undoes_the_charge_and_the_issues_newest_first_once_each(
    session: Session,
) -> None:
    first, second = session.results["first"], session.results["second"]
    charge = session.results["charge"].structured_content
    assert first.structured_content == {"number": 1, "title": "first"}
    assert second.structured_content == {"number": 2, "title": "second"}
    assert charge is not None
    assert [r["charge_id"] for r in session.payments.ops("refund")] == [charge["charge_id"]]
    assert [c["number"] for c in session.issues.ops("close_issue")] == [2, 1]
    fail = session.results["fail"]
    assert fail.is_error
    assert "declined: card network down" in text_of(fail)
    assert "compensated #3 pay_charge, #2 create_issue, #1 create_issue" in text_of(fail)
    # The order across the two upstreams, from the log: newest step first.
    sagas = saga_records(session.home)
    rolled_back = [
        rs for rs in sagas.values() if (saga_end(rs) or {}).get("status") == "rolled_back"
    ]
    assert len(rolled_back) == 1
    done = [r.data["ordinal"] for r in rolled_back[0] if r.kind == "compensation.done"]
    assert done == [3, 2, 1]
    # The refund reached the provider with the compensation's own idempotency key.
    charged = session.payments.ops("charge")[0]
    assert session.payments.ops("refund")[0]["key"] == charged["key"] + "/compensate"


def test_saga_status_shows_the_open_saga_then_the_rolled_back_one(session: Session) -> None:
    before = session.results["status_before"].structured_content
    after = session.results["status_after"].structured_content
    assert before is not None
    assert after is not None
    steps = before["open"]["steps"]
    assert [(s["ordinal"], s["tool"]) for s in steps] == [
        (1, "create_issue"),
        (2, "create_issue"),
        (3, "pay_charge"),
    ]
    assert after["open"] is None
    assert after["last"]["status"] == "rolled_back"
    assert after["last"]["compensated"] == [3, 2, 1]


def test_a_clean_end_of_the_session_commits_its_saga(session: Session) -> None:
    assert session.results["third"].structured_content == {"number": 3, "title": "third"}
    ends = [saga_end(rs) for rs in saga_records(session.home).values()]
    assert sorted(str((e or {}).get("status")) for e in ends) == ["committed", "rolled_back"]
    assert 3 not in [c["number"] for c in session.issues.ops("close_issue")]


def test_the_log_verifies_and_certify_passes(session: Session) -> None:
    assert session.verify_code == 0, session.verify
    assert "log intact" in session.verify
    assert session.certify_code == 0, session.certify
    assert "certified: 2 sagas" in session.certify
