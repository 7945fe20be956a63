"""A gateway SIGKILLed mid-session, and ``agent-saga recover`` finishing its rollback through
the upstreams; and a gateway stopped by SIGTERM, which rolls its open session back itself.

The session opens an issue and makes a charge (both done), then starts a slow charge: the
provider records it and takes a minute to answer. While that call is in flight the gateway's
process is killed with SIGKILL (its pid read from the saga's first record, as an operator would).
Recovery, in another process that never ran the gateway, loads the compensations from the
gateway's configuration (``agent_saga_mcp.recovery``), probes the in-flight charge (it landed),
and undoes all three steps newest first, once each, through the upstreams.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from mcp_testkit import (
    Ledger,
    eventually,
    issues_only,
    readme_config,
    run_cli,
    saga_end,
    saga_records,
    start_http_upstream,
    stdio_gateway,
    text_of,
)

SLOW_CHARGE = """
[upstreams.payments.tools.slow_charge]
idempotency_key = "idempotency_key"

[upstreams.payments.tools.slow_charge.compensate]
tool = "refund"
arguments = { charge_id = "result.charge_id", idempotency_key = "idempotency_key" }

[upstreams.payments.tools.slow_charge.probe]
tool = "find_charge"
arguments = { idempotency_key = "idempotency_key" }
landed = "result.found"
result = "result.charge"
"""


def _gateway_pid(home: Path) -> int | None:
    for records in saga_records(home).values():
        if records[0].kind == "saga.begin":
            return int(str(records[0].data["pid"]))
    return None


async def _crash(home: Path, config: Path, errlog: Path, payments: Ledger) -> int:
    """Run the session up to the in-flight slow charge, then SIGKILL the gateway."""
    with errlog.open("w") as err:
        async with stdio_gateway(home, config, err) as client:
            made = await client.call_tool("create_issue", {"title": "doomed"})
            assert not made.is_error, text_of(made)
            charged = await client.call_tool("pay_charge", {"amount": 30.0, "card": "visa-1"})
            assert not charged.is_error, text_of(charged)
            slow = asyncio.create_task(
                client.call_tool("pay_slow_charge", {"amount": 20.0, "card": "visa-1"})
            )
            await eventually(lambda: len(payments.ops("charge")) == 2)
            pid = _gateway_pid(home)
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            await asyncio.wait([slow], timeout=30)
    return pid


def test_recover_runs_each_compensation_of_a_killed_gateway_once(tmp_path: Path) -> None:
    payments = start_http_upstream("payments", tmp_path / "payments.jsonl", tmp_path / "pay.err")
    issues = Ledger(tmp_path / "issues.jsonl")
    home, config = tmp_path / "home", tmp_path / "gateway.toml"
    config.write_text(readme_config(payments.url, issues.path, SLOW_CHARGE))
    try:
        pid = asyncio.run(_crash(home, config, tmp_path / "gateway.err", payments.ledger))
        assert payments.ledger.ops("refund") == []  # the dead gateway undid nothing
        assert issues.ops("close_issue") == []
        [records] = saga_records(home).values()
        assert saga_end(records) is None

        env = {"AGENT_SAGA_MCP_CONFIG": str(config)}
        first = run_cli(home, "recover", "--import", "agent_saga_mcp.recovery", env=env)
        assert first.returncode == 0, first.stdout + first.stderr
        charges = [c["charge_id"] for c in payments.ledger.ops("charge")]
        assert sorted(r["charge_id"] for r in payments.ledger.ops("refund")) == sorted(charges)
        assert [c["number"] for c in issues.ops("close_issue")] == [1]
        assert "#3 pay_slow_charge  compensated" in first.stdout
        assert "-> rolled_back" in first.stdout

        again = run_cli(home, "recover", "--import", "agent_saga_mcp.recovery", env=env)
        assert again.returncode == 0, again.stdout + again.stderr
        assert "nothing to recover" in again.stdout
        assert len(payments.ledger.ops("refund")) == 2
        assert len(issues.ops("close_issue")) == 1
    finally:
        payments.stop()
    [records] = saga_records(home).values()
    end = saga_end(records)
    assert end is not None
    assert (end["status"], end["recovered"], end["compensated"]) == ("rolled_back", True, [3, 2, 1])
    probed = [r.data for r in records if r.kind == "step.probed"]
    assert [(p["ordinal"], p["landed"]) for p in probed] == [(3, True)]
    assert all(r.data["pid"] == pid for r in records if r.kind == "saga.begin")
    certified = run_cli(home, "certify")
    assert certified.returncode == 0, certified.stdout + certified.stderr
    verified = run_cli(home, "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_recover_refuses_to_run_without_the_gateway_configuration(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "log.jsonl").write_text("")
    result = run_cli(home, "recover", "--import", "agent_saga_mcp.recovery")
    assert result.returncode != 0
    assert "set AGENT_SAGA_MCP_CONFIG to the gateway's configuration file" in result.stderr


def test_a_gateway_stopped_by_sigterm_rolls_its_session_back(tmp_path: Path) -> None:
    issues = Ledger(tmp_path / "issues.jsonl")
    home, config = tmp_path / "home", tmp_path / "gateway.toml"
    config.write_text(issues_only(readme_config("http://127.0.0.1:9/unused", issues.path)))

    async def run() -> int:
        with (tmp_path / "gateway.err").open("w") as err:
            async with stdio_gateway(home, config, err) as client:
                made = await client.call_tool("create_issue", {"title": "stopped"})
                assert not made.is_error, text_of(made)
                pid = _gateway_pid(home)
                assert pid is not None
                os.kill(pid, signal.SIGTERM)
                await eventually(lambda: issues.ops("close_issue"))
        return pid

    asyncio.run(run())
    assert [c["number"] for c in issues.ops("close_issue")] == [1]
    [records] = saga_records(home).values()
    end = saga_end(records)
    assert end is not None
    assert end["status"] == "rolled_back"
    assert "the gateway stopped" in str(end["cause"])
