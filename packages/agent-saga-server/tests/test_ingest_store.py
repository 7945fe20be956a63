"""Ingest at the store, on SQLite and on the real PostgreSQL: a batch's chain is checked
before its writing transaction, so two batches of one origin arriving at once must still be
stored once (the same batch twice) or one refused as a conflict and kept as evidence (two
different logs for one origin), whichever commits first."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_saga import AgentKit, read_log
from agent_saga.testing.postgres import scratch_schema, server_for_tests
from agent_saga_server.store.db import Database, PostgresDatabase, SqliteDatabase
from agent_saga_server.store.ingest import IngestRefused, IngestResult, ingest, read_records


def _log(home: Path, transactions: int) -> list[dict[str, Any]]:
    kit = AgentKit(home=home, checkpoints=False)

    @kit.tool(name="crm.tag", compensate=lambda key: None)
    def tag(key: str) -> str:
        return key

    for i in range(transactions):
        with kit.transaction(f"tagging-{i}"):
            tag(f"a{i}")
    kit.close()
    return [record.to_json() for record in read_log(home)]


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    if request.param == "sqlite":
        db: Database = SqliteDatabase(tmp_path / "plane.sqlite3")
        yield db
        db.close()
        return
    with server_for_tests() as url, scratch_schema(url) as schema:
        db = PostgresDatabase(url, schema=schema, pool_size=4)
        yield db
        db.close()


def _at_once(*sends: Any) -> list[IngestResult | IngestRefused]:
    """Run each send in its own thread, released together; what each returned or raised."""
    results: list[IngestResult | IngestRefused] = []
    start = threading.Barrier(len(sends))

    def run(send: Any) -> None:
        start.wait()
        try:
            results.append(send())
        except IngestRefused as refused:
            results.append(refused)

    threads = [threading.Thread(target=run, args=(send,)) for send in sends]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


def test_one_batch_sent_twice_at_once_is_stored_once(database: Database, tmp_path: Path) -> None:
    records = _log(tmp_path / "agent", 6)
    results = _at_once(*[lambda: ingest(database, "twice", records, "t")] * 2)
    counts = sorted((r.accepted, r.duplicates) for r in results if isinstance(r, IngestResult))
    assert counts == [(0, len(records)), (len(records), 0)]
    with database.transaction(write=False) as tx:
        stored = read_records(tx, "twice")
    assert [(r.seq, r.hash) for r in stored] == [(r["seq"], r["hash"]) for r in records]


def test_two_logs_for_one_origin_at_once_store_one_and_keep_the_other_as_evidence(
    database: Database, tmp_path: Path
) -> None:
    first, second = _log(tmp_path / "one", 6), _log(tmp_path / "two", 6)
    assert len(first) == len(second)
    assert first[0]["hash"] != second[0]["hash"]
    results = _at_once(
        lambda: ingest(database, "forked", first, "t1"),
        lambda: ingest(database, "forked", second, "t2"),
    )
    refused = [r for r in results if isinstance(r, IngestRefused)]
    stored_results = [r for r in results if isinstance(r, IngestResult)]
    assert len(refused) == 1
    assert refused[0].status == 409
    assert [(r.accepted, r.duplicates) for r in stored_results] == [(len(first), 0)]
    with database.transaction(write=False) as tx:
        stored = read_records(tx, "forked")
        evidence = tx.all("SELECT what FROM conflicts WHERE origin = ?", ("forked",))
    kept = first if stored[0].hash == first[0]["hash"] else second
    assert [(r.seq, r.hash) for r in stored] == [(r["seq"], r["hash"]) for r in kept]
    assert evidence == [("records",)]
