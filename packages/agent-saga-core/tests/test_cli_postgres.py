"""The reading and proving commands against the fleet log on a real PostgreSQL server.

The store is named the way an operator names it: ``store = "postgresql://..."`` (with
``store_schema``) in ``agent-saga.toml``, or ``AGENT_SAGA_STORE`` / ``AGENT_SAGA_STORE_SCHEMA``.
The kits that write a PostgreSQL log publish its checkpoints in their own home
(``checkpoints/latest.note``, signed with ``keys/checkpoint.key``); the commands read and
publish them there too. Each test has its own schema, dropped afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from agent_saga import AgentKit, Entry, SagaRolledBack, SequentialIds, compensator, tool
from agent_saga._kit.manifest import VERIFIED
from agent_saga._postgres.store import PostgresLogStore
from agent_saga.cli import main
from click.testing import CliRunner, Result
from psycopg import sql

REFUNDS: list[str] = []


@compensator("fleet_cli.refund")
def _refund(result: str) -> None:
    if result == "ch_13":
        raise ConnectionError("payments API down")
    REFUNDS.append(result)


@tool(name="fleet_cli.charge", semantics="compensable", compensate="fleet_cli.refund")
def charge(cents: int) -> str:
    return f"ch_{cents}"


@pytest.fixture
def fleet(pg_url: str, schema: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project whose configuration names the fleet log; the working directory is in it."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "agent-saga.toml").write_text(
        f"store = {json.dumps(pg_url)}\nstore_schema = {json.dumps(schema)}\n"
    )
    monkeypatch.chdir(project)
    return project


def fleet_kit(pg_url: str, schema: str, home: Path, **options: Any) -> AgentKit:
    """A kit on the fleet log, as an agent host runs one (its checkpoints go in ``home``)."""
    return AgentKit(home=home, store=PostgresLogStore(pg_url, schema=schema), **options)


def three_sagas(pg_url: str, schema: str, home: Path) -> list[str]:
    """A committed, a rolled-back and a needs-human saga in the fleet log."""
    with fleet_kit(pg_url, schema, home, ids=SequentialIds("fleet")) as kit:
        with kit.transaction("paid"):
            charge(100)
        with pytest.raises(SagaRolledBack), kit.transaction("declined"):
            charge(200)
            raise RuntimeError("card declined")
        with pytest.raises(SagaRolledBack), kit.transaction("stuck"):
            charge(13)
            raise RuntimeError("late failure")
    return ["fleet-0001", "fleet-0002", "fleet-0003"]


def run(home: Path, *args: str) -> Result:
    return CliRunner().invoke(main, ["--home", str(home), *args])


def sql_exec(url: str, schema: str, query: str, *params: object) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(sql.SQL(query).format(s=sql.Identifier(schema)), params)
        return cursor.fetchall() if cursor.description else []


def record_count(url: str, schema: str) -> int:
    return int(sql_exec(url, schema, "SELECT count(*) FROM {s}.records")[0][0])


def test_sagas_and_replay_read_the_fleet_log(
    pg_url: str, schema: str, fleet: Path, home: Path
) -> None:
    ids = three_sagas(pg_url, schema, home)
    listing = run(home, "sagas")
    assert listing.exit_code == 0, listing.output
    rows = [line.split() for line in listing.stdout.splitlines() if line.startswith("fleet-")]
    assert [(r[0], r[1]) for r in rows] == [
        (ids[0], "committed"),
        (ids[1], "rolled_back"),
        (ids[2], "needs_human"),
    ]
    replay = run(home, "replay", ids[1])
    assert replay.exit_code == 0, replay.output
    assert "fleet_cli.refund (by name) -> compensated" in replay.stdout
    assert "final status  rolled_back" in replay.stdout


def test_verify_checks_the_fleet_chain_against_the_kits_checkpoint(
    pg_url: str, schema: str, fleet: Path, home: Path
) -> None:
    three_sagas(pg_url, schema, home)
    count = record_count(pg_url, schema)
    assert (home / "checkpoints" / "latest.note").is_file()  # where the kit published it
    result = run(home, "verify")
    assert result.exit_code == 0, result.output
    assert f"log intact: {count} records" in result.stdout
    assert f"schema {schema}" in result.stdout
    assert f"consistent with the latest checkpoint ({count} records)" in result.stdout


def test_checkpoint_publishes_where_the_kits_do_and_verify_uses_it(
    pg_url: str, schema: str, fleet: Path, home: Path
) -> None:
    with fleet_kit(pg_url, schema, home, checkpoints=False) as kit, kit.transaction("one"):
        charge(1)
    assert not (home / "checkpoints").exists()
    published = run(home, "checkpoint")
    assert published.exit_code == 0, published.output
    count = record_count(pg_url, schema)
    assert f"checkpoint: {count} records" in published.stdout
    note = (home / "checkpoints" / "latest.note").read_text()
    assert note.splitlines()[1] == str(count)
    # a kit publishing later must extend the command's checkpoint (same file, same key)
    with fleet_kit(pg_url, schema, home) as kit, kit.transaction("two"):
        charge(2)
    assert (home / "checkpoints" / "latest.note").read_text().splitlines()[1] == str(
        record_count(pg_url, schema)
    )
    assert run(home, "verify").exit_code == 0


def test_prove_writes_a_bundle_that_verifies_offline(
    pg_url: str, schema: str, fleet: Path, home: Path, tmp_path: Path
) -> None:
    ids = three_sagas(pg_url, schema, home)
    bundle = tmp_path / "bundle.json"
    proved = run(home, "prove", ids[1], "-o", str(bundle))
    assert proved.exit_code == 0, proved.output
    public = (home / "keys" / "checkpoint.pub").read_text().strip()
    checked = run(home, "verify-proof", str(bundle), "--key", public)
    assert checked.exit_code == 0, checked.output
    assert f"verified: saga {ids[1]}" in checked.stdout


def test_certify_finds_the_failed_compensation_in_the_fleet_log(
    pg_url: str, schema: str, fleet: Path, home: Path, tmp_path: Path
) -> None:
    three_sagas(pg_url, schema, home)
    out = tmp_path / "cert.json"
    result = run(home, "certify", "--out", str(out))
    assert result.exit_code == 1, result.output
    assert "compensating fleet_cli.charge failed" in result.stdout
    cert = json.loads(out.read_text())
    assert cert["counts"]["sagas"] == 3
    assert cert["counts"]["records"] == record_count(pg_url, schema)


def test_certify_certifies_a_sound_fleet_log(
    pg_url: str, schema: str, fleet: Path, home: Path
) -> None:
    with fleet_kit(pg_url, schema, home) as kit, kit.transaction("paid"):
        charge(7)
    result = run(home, "certify")
    assert result.exit_code == 0, result.output
    assert "certified: 1 sagas" in result.stdout


def test_a_row_edited_in_the_database_is_caught(
    pg_url: str, schema: str, fleet: Path, home: Path
) -> None:
    three_sagas(pg_url, schema, home)
    ((seq,),) = sql_exec(
        pg_url,
        schema,
        "UPDATE {s}.records SET line = convert_to(replace(convert_from(line, 'UTF8'), "
        "'\"cents\":200', '\"cents\":900'), 'UTF8') WHERE seq = (SELECT min(seq) FROM "
        "{s}.records WHERE convert_from(line, 'UTF8') LIKE '%%\"cents\":200%%') RETURNING seq",
    )
    verified = run(home, "verify")
    assert verified.exit_code == 1, verified.output
    assert f"log BROKEN at seq {seq}:" in verified.stdout
    assert run(home, "certify").exit_code == 1
    listing = run(home, "sagas")
    assert listing.exit_code == 1
    assert f"seq {seq}" in listing.stderr


def test_rows_deleted_after_the_checkpoint_are_caught(
    pg_url: str, schema: str, fleet: Path, home: Path
) -> None:
    three_sagas(pg_url, schema, home)
    count = record_count(pg_url, schema)
    sql_exec(pg_url, schema, "DELETE FROM {s}.records WHERE seq > %s", count - 3)
    result = run(home, "verify")
    assert result.exit_code == 1, result.output
    assert "log truncated" in result.stdout
    assert run(home, "certify").exit_code == 1


def test_the_environment_names_the_store_too(
    pg_url: str, schema: str, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    three_sagas(pg_url, schema, home)
    monkeypatch.setenv("AGENT_SAGA_STORE", pg_url)
    monkeypatch.setenv("AGENT_SAGA_STORE_SCHEMA", schema)
    result = run(home, "sagas")
    assert result.exit_code == 0, result.output
    assert "fleet-0003" in result.stdout


def test_many_pages_of_rows_are_read_in_order(
    pg_url: str, schema: str, fleet: Path, home: Path
) -> None:
    with PostgresLogStore(pg_url, schema=schema) as store:
        for batch in range(5):
            entries = [Entry("note", None, {"i": batch * 500 + i}, 0) for i in range(500)]
            store.append(entries, sync=batch == 4)
    result = run(home, "verify")
    assert result.exit_code == 0, result.output
    assert "log intact: 2500 records" in result.stdout


def test_status_guarantees_and_recover_open_the_fleet_log(
    pg_url: str, schema: str, fleet: Path, home: Path
) -> None:
    three_sagas(pg_url, schema, home)
    status = run(home, "status")
    assert status.exit_code == 0, status.output
    manifest = run(home, "guarantees", "--json")
    assert manifest.exit_code == 0, manifest.output
    stated = json.loads(manifest.stdout)
    store = stated["store"]
    assert (store["kind"], store["where"].endswith(f"schema {schema}")) == ("postgres", True)
    assert VERIFIED["postgres"] in stated["guaranteed_after"]
    recovered = run(home, "recover")
    assert recovered.exit_code == 3, recovered.output  # fleet-0003 needs a human
    assert "fleet-0003" in recovered.output


def test_a_keyed_fleet_log_is_read_with_the_key(
    pg_url: str, schema: str, fleet: Path, home: Path, tmp_path: Path
) -> None:
    key_file = tmp_path / "chain.key"
    key_file.write_text("a" * 64 + "\n")
    key_file.chmod(0o600)
    store = PostgresLogStore(pg_url, schema=schema, key=b"a" * 64)
    with AgentKit(home=home, store=store) as kit, kit.transaction("keyed"):
        charge(5)
    assert run(home, "--chain-key-file", str(key_file), "verify").exit_code == 0
    without = run(home, "verify")
    assert without.exit_code == 1
    assert "chain key" in without.stderr


def test_a_file_store_command_never_loads_psycopg(home: Path, tmp_path: Path) -> None:
    with AgentKit(home=home) as kit, kit.transaction("local"):
        charge(3)
    probe = (
        "import sys\n"
        "from agent_saga.cli import main\n"
        "for args in (['verify'], ['sagas'], ['certify'], ['checkpoint']):\n"
        "    try:\n"
        "        main(['--home', sys.argv[1], *args])\n"
        "    except SystemExit as exc:\n"
        "        assert not exc.code, (args, exc.code)\n"
        "print('psycopg' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe, str(home)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if not k.startswith("AGENT_SAGA_STORE")},
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "False"
