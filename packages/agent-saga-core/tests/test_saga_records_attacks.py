"""Attacks on ``agent_saga.cli.saga_records``: prefixes that are LIKE wildcards, and a
PostgreSQL user who can write the agent's schema hiding a record of a saga from the ``saga``
column. The answer is the saga's records, all of them, or a one-line error."""

from __future__ import annotations

import json
from pathlib import Path

import click
import psycopg
import pytest
from agent_saga import AgentKit, CorruptLogError, SequentialIds
from agent_saga.cli import Settings, saga_records
from psycopg import sql
from rich.console import Console


def _settings(home: Path) -> Settings:
    return Settings(home=home, home_given=True, console=Console(), err=Console(stderr=True))


def _two_sagas(home: Path) -> None:
    """Sagas ``a_b-0001`` and ``axb-0001``, two steps each."""
    for prefix in ("a_b", "axb"):
        with AgentKit(home=home, ids=SequentialIds(prefix), checkpoints=False) as kit:

            @kit.compensator("recs.unnote")
            def unnote(result: int) -> None:
                pass

            @kit.tool(name="recs.note", compensate="recs.unnote")
            def note(n: int) -> int:
                return n

            with kit.transaction("t"):
                note(1)
                note(2)


def _check_wildcards(settings: Settings) -> None:
    got = saga_records(settings, "a_")
    assert {r.saga for r in got} == {"a_b-0001"}
    for text in ("%", "_", "a%", "\\"):
        with pytest.raises(click.ClickException) as unknown:
            saga_records(settings, text)
        assert unknown.value.message == f"no saga matches {text!r} (2 saga(s) in the log)"


def test_wildcards_in_a_prefix_match_themselves_in_a_file_log(tmp_path: Path) -> None:
    _two_sagas(tmp_path / "home")
    _check_wildcards(_settings(tmp_path / "home"))


def _on_server(tmp_path: Path, pg_url: str, schema: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    (project / "agent-saga.toml").write_text(
        f"store = {json.dumps(pg_url)}\nstore_schema = {json.dumps(schema)}\n"
    )
    monkeypatch.chdir(project)
    home = tmp_path / "home"
    _two_sagas(home)
    assert not (home / "log.jsonl").exists()
    return home


def test_wildcards_in_a_prefix_match_themselves_on_postgres(
    pg_url: str, schema: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _check_wildcards(_settings(_on_server(tmp_path, pg_url, schema, monkeypatch)))


def test_a_record_hidden_from_the_saga_column_is_not_left_out(
    pg_url: str, schema: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _on_server(tmp_path, pg_url, schema, monkeypatch)
    whole = saga_records(_settings(home), "a_b-0001")
    hidden = next(r.seq for r in whole if r.kind == "step.intent")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("UPDATE {s}.records SET saga = NULL WHERE seq = %s").format(
                s=sql.Identifier(schema)
            ),
            (hidden,),
        )
    with pytest.raises(CorruptLogError) as refused:
        saga_records(_settings(home), "a_b-0001")
    assert f"(seq {hidden + 1}): record {hidden + 1} is saga a_b-0001's record 2" in str(
        refused.value
    )
