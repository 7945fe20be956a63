"""``agent-saga bpmn``: found through the core's entry points, one-line errors, exit codes."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from agent_saga.cli import main
from agent_saga.testing.postgres import scratch_schema, server_for_tests
from agent_saga_bpmn import parse_flow
from click.testing import CliRunner, Result

if TYPE_CHECKING:
    from conftest import Run, TripRunner

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
TRIP = EXAMPLES / "trip.bpmn"


def agent_saga(home: Path, *args: str) -> Result:
    return CliRunner().invoke(main, ["--home", str(home), "bpmn", *args])


def test_codegen_writes_the_module(tmp_path: Path) -> None:
    out = tmp_path / "trip_flow.py"
    result = agent_saga(tmp_path / "home", "codegen", str(TRIP), "-o", str(out))
    assert result.exit_code == 0, result.output
    assert result.stderr == f"wrote {out}\n"
    source = out.read_text(encoding="utf-8")
    assert source.startswith('"""trip_flow: a saga generated from a BPMN diagram')
    ast.parse(source)
    printed = agent_saga(tmp_path / "home", "codegen", str(TRIP), "--module", "trip_flow")
    assert printed.stdout == source


def test_problems_are_listed_one_a_line_and_exit_1(tmp_path: Path) -> None:
    result = agent_saga(tmp_path, "codegen", str(TRIP), "--known-tool", "flights.book")
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        f"{TRIP}: BookHotel: unknown tool 'hotels.book': not among the 1 known tools",
        f"{TRIP}: ChargeCard: unknown tool 'payments.charge': not among the 1 known tools",
        f"Error: {TRIP}: 2 problem(s), listed above",
    ]
    assert result.stdout == ""
    checked = agent_saga(tmp_path, "check", str(TRIP))
    assert (checked.exit_code, checked.stdout) == (0, f"{TRIP}: 3 task(s), no problem\n")


def test_unreadable_input_is_one_line(tmp_path: Path) -> None:
    missing = agent_saga(tmp_path, "codegen", str(tmp_path / "nope.bpmn"))
    assert (missing.exit_code, missing.stderr) == (
        2,
        f"Error: no file at {tmp_path / 'nope.bpmn'}\n",
    )
    bad = tmp_path / "bad.bpmn"
    bad.write_text("<definitions>\n<oops></definitions>", encoding="utf-8")
    malformed = agent_saga(tmp_path, "check", str(bad))
    assert malformed.exit_code == 1
    assert malformed.stderr == f"Error: {bad}: malformed XML at line 2, column 9: mismatched tag\n"
    huge = tmp_path / "huge.bpmn"
    with huge.open("wb") as sparse:
        sparse.truncate(50 * 1024 * 1024)  # 50 MB on paper; refused from its size, never read
    refused = agent_saga(tmp_path, "codegen", str(huge))
    assert refused.exit_code == 1
    assert refused.stderr == (
        f"Error: {huge}: 52,428,800 bytes, over the limit of 4,194,304; not read\n"
    )


def test_export_draws_a_recorded_saga_by_prefix(trip_run: Run, tmp_path: Path) -> None:
    saga_id = next(r["saga"] for r in trip_run.records() if r["saga"])
    out = tmp_path / "saga.bpmn"
    result = agent_saga(trip_run.home, "export", saga_id[:8], "-o", str(out))
    assert result.exit_code == 0, result.output
    assert result.stderr == f"wrote {out} (saga {saga_id})\n"
    flow = parse_flow(out.read_bytes())
    assert [t.tool for t in flow.tasks if t.kind == "service"] == [
        "flights.book", "hotels.book", "payments.charge",
    ]  # fmt: skip
    printed = agent_saga(trip_run.home, "export", saga_id.upper().replace("-", ""))
    assert printed.stdout == out.read_text(encoding="utf-8")


def test_a_saga_id_alone_draws_the_saga(trip_run: Run, tmp_path: Path) -> None:
    saga_id = next(r["saga"] for r in trip_run.records() if r["saga"])
    out = tmp_path / "short.bpmn"
    short = agent_saga(trip_run.home, saga_id[:13], "-o", str(out))
    assert short.exit_code == 0, short.output
    assert short.stderr == f"wrote {out} (saga {saga_id})\n"
    assert out.read_text(encoding="utf-8") == agent_saga(trip_run.home, "export", saga_id).stdout
    assert agent_saga(trip_run.home, saga_id).stdout == out.read_text(encoding="utf-8")
    unknown = agent_saga(trip_run.home, "codgen", "flow.bpmn")  # a typo is no saga id either
    assert unknown.exit_code == 2
    assert unknown.stderr.startswith("Error: Got unexpected extra argument (flow.bpmn)")
    typo = agent_saga(trip_run.home, "codgen")
    assert (typo.exit_code, typo.stderr) == (
        2,
        "Error: no saga matches 'codgen' (1 saga(s) in the log);"
        " nor is it a command (check, codegen, export)\n",
    )


def test_export_errors_are_one_line_with_exit_2(trip_run: Run, tmp_path: Path) -> None:
    unknown = agent_saga(trip_run.home, "export", "zzzz")
    assert (unknown.exit_code, unknown.stderr) == (
        2,
        "Error: no saga matches 'zzzz' (1 saga(s) in the log)\n",
    )
    empty = agent_saga(tmp_path / "empty", "export", "abc")
    assert empty.exit_code == 2
    log = tmp_path / "empty" / "log.jsonl"
    assert empty.stderr == f"Error: no log at {log} (check --home or AGENT_SAGA_HOME)\n"
    assert not (tmp_path / "empty").exists()  # reading never creates the home


def test_the_command_runs_under_the_core_group() -> None:
    helped = CliRunner().invoke(main, ["bpmn", "--help"], prog_name="agent-saga")
    assert helped.exit_code == 0
    assert {"check", "codegen", "export"} <= set(helped.stdout.split())
    assert helped.stdout.splitlines()[:2] == [
        "Usage: agent-saga bpmn [OPTIONS] SAGA_ID [-o FILE]",
        "   or: agent-saga bpmn [OPTIONS] COMMAND [ARGS]...",
    ]


def test_a_saga_in_a_fleet_log_on_postgresql_is_drawn(
    run_trip: TripRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trip's generated code run by an agent whose store is PostgreSQL; the saga is then
    drawn from the server (nothing in the home's file log)."""
    with server_for_tests() as url, scratch_schema(url) as schema:
        fleet = {"AGENT_SAGA_STORE": url, "AGENT_SAGA_STORE_SCHEMA": schema}
        run = run_trip(tmp_path, fleet)
        assert run.ledger[-1] == "cancel FL-1"  # the flight was undone last
        assert not (run.home / "log.jsonl").exists()
        for name, value in fleet.items():
            monkeypatch.setenv(name, value)
        rows = _query(url, schema, "SELECT DISTINCT saga FROM {s}.records WHERE saga IS NOT NULL")
        assert len(rows) == 1
        saga_id = str(rows[0][0])
        out = tmp_path / "fleet.bpmn"
        drawn = agent_saga(run.home, saga_id.replace("-", "")[:12].upper(), "-o", str(out))
        assert drawn.exit_code == 0, drawn.output
        assert drawn.stderr == f"wrote {out} (saga {saga_id})\n"
        flow = parse_flow(out.read_bytes())
        assert [(t.tool, t.compensator) for t in flow.tasks if t.kind == "service"] == [
            ("flights.book", "flights.cancel"),
            ("hotels.book", "hotels.cancel"),
            ("payments.charge", "payments.refund"),
        ]
        assert "undo 1: flights.cancel (compensated)" in out.read_text(encoding="utf-8")
        unknown = agent_saga(run.home, "export", "ffff")
        assert (unknown.exit_code, unknown.stderr) == (
            2,
            "Error: no saga matches 'ffff' (1 saga(s) in the log)\n",
        )


def _query(url: str, schema: str, statement: str) -> list[tuple[object, ...]]:
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(sql.SQL(statement).format(s=sql.Identifier(schema))).fetchall()
