"""``agent_saga.cli.saga_records``: one saga's records from the configured log, file or
PostgreSQL, found by an id or a unique prefix, equal to what a full read of the log holds."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import click
import psycopg
import pytest
from agent_saga import AgentKit, CorruptLogError, SagaRolledBack, SequentialIds, read_log
from agent_saga.cli import Settings, saga_records
from psycopg import sql
from rich.console import Console


def _settings(home: Path) -> Settings:
    return Settings(home=home, home_given=True, console=Console(), err=Console(stderr=True))


def _record_sagas(kit: AgentKit) -> None:
    """Three sagas: two committed steps, a rollback, and a third sharing the first's prefix."""

    @kit.compensator("recs.refund")
    def refund(result: Any) -> None:
        pass

    @kit.tool(name="recs.charge", compensate="recs.refund")
    def charge(cents: int) -> str:
        return f"ch_{cents}"

    with kit.transaction("paid"):
        charge(1)
        charge(2)
    with pytest.raises(SagaRolledBack), kit.transaction("declined"):
        charge(3)
        raise RuntimeError("declined")
    with kit.transaction("again"):
        charge(4)


def _expected(records: list[Any], saga_id: str) -> list[dict[str, Any]]:
    return [r.to_json() for r in records if r.saga == saga_id]


def _check_lookups(settings: Settings, full: list[Any]) -> None:
    got = saga_records(settings, "recs-0002")
    assert [r.to_json() for r in got] == _expected(full, "recs-0002")
    assert got[0].kind == "saga.begin"
    assert "compensation.done" in {r.kind for r in got}
    by_prefix = saga_records(settings, "  RECS0003 ")  # case, dashes and spaces aside
    assert [r.to_json() for r in by_prefix] == _expected(full, "recs-0003")
    with pytest.raises(click.ClickException) as unknown:
        saga_records(settings, "zzz")
    assert unknown.value.exit_code == 2
    assert unknown.value.message == "no saga matches 'zzz' (3 saga(s) in the log)"
    with pytest.raises(click.ClickException) as ambiguous:
        saga_records(settings, "recs-000")
    assert ambiguous.value.exit_code == 2
    assert ambiguous.value.message == (
        "saga id prefix 'recs-000' is ambiguous: 3 sagas match: recs-0001, recs-0002, recs-0003"
    )
    with pytest.raises(click.ClickException, match=r"^empty saga id$"):
        saga_records(settings, " ")


def test_a_file_log_is_read_through_its_index_and_in_full(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with AgentKit(home=home, ids=SequentialIds("recs")) as kit:
        _record_sagas(kit)
    full = list(read_log(home))
    _check_lookups(_settings(home), full)
    assert (home / "index").is_dir()  # the saga index answered
    shutil.rmtree(home / "index")
    (home / "index").write_text("not a directory")  # no index can be kept: a full read
    _check_lookups(_settings(home), full)
    assert (home / "index").read_text() == "not a directory"


def test_no_log_is_one_line_and_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(click.ClickException) as missing:
        saga_records(_settings(tmp_path / "none"), "abc")
    assert missing.value.exit_code == 2
    assert missing.value.message.startswith(f"no log at {tmp_path / 'none' / 'log.jsonl'}")
    assert not (tmp_path / "none").exists()


def _sql(url: str, schema: str, statement: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL(statement).format(s=sql.Identifier(schema)))


def test_a_fleet_log_is_read_through_its_saga_column(
    pg_url: str, schema: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "agent-saga.toml").write_text(
        f"store = {json.dumps(pg_url)}\nstore_schema = {json.dumps(schema)}\n"
    )
    monkeypatch.chdir(project)
    home = tmp_path / "home"
    with AgentKit(home=home, ids=SequentialIds("recs")) as kit:
        _record_sagas(kit)
        full = list(kit.store.records())
    assert not (home / "log.jsonl").exists()  # the log is on the server
    _check_lookups(_settings(home), full)
    # rows written before the saga column existed: a read-only reader reads them all
    _sql(pg_url, schema, "UPDATE {s}.records SET saga = NULL, kind = NULL WHERE seq = 1")
    _check_lookups(_settings(home), full)
    restore = "UPDATE {s}.records SET saga = 'recs-0001', kind = 'saga.begin' WHERE seq = 1"
    _sql(pg_url, schema, restore)
    # a row of another saga altered: reading one saga reads its own rows only
    _sql(
        pg_url,
        schema,
        "UPDATE {s}.records SET line = convert_to(replace(convert_from(line, 'UTF8'),"
        " 'ch_1', 'ch_9'), 'UTF8') WHERE saga = 'recs-0001' AND kind = 'step.done'",
    )
    assert [r.to_json() for r in saga_records(_settings(home), "recs-0002")] == _expected(
        full, "recs-0002"
    )
    with pytest.raises(CorruptLogError):
        saga_records(_settings(home), "recs-0001")
