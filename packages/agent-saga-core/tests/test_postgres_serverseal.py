"""Batches sealed on the PostgreSQL server: acknowledged only after the flush, sealed exactly as
this process would have, and settled once after a broken connection.

The server is the conftest's ``pg_url``.
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest
from agent_saga import Entry, StoreFailedError
from agent_saga._log.chain import Chain
from agent_saga._log.records import GENESIS
from agent_saga._postgres.serverseal import PreparedBatch, ServerSealWriter
from agent_saga._postgres.sql import queries
from agent_saga._postgres.store import PostgresLogStore
from agent_saga._postgres.write import Unknown
from psycopg import sql


def run(url: str, schema: str, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(sql.SQL(query).format(s=sql.Identifier(schema)), params)
        return cursor.fetchall() if cursor.description else []


def test_a_durable_append_is_acknowledged_only_once_the_wal_is_flushed_past_it(
    pg_url: str, schema: str
) -> None:
    # A trigger notes, inside each batch's transaction, the WAL position after its rows: the
    # commit record comes later still, so a flush short of that position loses the batch.
    with PostgresLogStore(pg_url, schema=schema) as first:
        run(
            pg_url,
            schema,
            "CREATE TABLE {s}.seen (last bigint PRIMARY KEY, lsn pg_lsn NOT NULL);"
            " CREATE FUNCTION {s}.note() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            " INSERT INTO {s}.seen SELECT max(seq), pg_current_wal_insert_lsn() FROM new_rows;"
            " RETURN NULL; END $$;"
            " CREATE TRIGGER note AFTER INSERT ON {s}.records REFERENCING NEW TABLE AS new_rows"
            " FOR EACH STATEMENT EXECUTE FUNCTION {s}.note()",
        )
        late: list[tuple[int, str, str]] = []

        def work(store: PostgresLogStore, saga: str) -> None:
            with psycopg.connect(pg_url, autocommit=True) as watch:
                check = sql.SQL(
                    "SELECT pg_current_wal_flush_lsn(), lsn FROM {s}.seen WHERE last = %s"
                ).format(s=sql.Identifier(schema))
                for i in range(12):
                    seq = store.append([Entry("t.step", saga, {"i": i}, i)], sync=True)[0].seq
                    flushed, noted = watch.execute(check, (seq,)).fetchone() or ("", "")
                    if int(flushed.replace("/", ""), 16) < int(noted.replace("/", ""), 16):
                        late.append((seq, flushed, noted))

        with PostgresLogStore(pg_url, schema=schema) as second:
            threads = [
                threading.Thread(target=work, args=(store, f"s{n}"))
                for n, store in enumerate([first, second])
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        assert first.verify().records == 24
    assert late == []
    assert run(pg_url, schema, "SELECT count(*) FROM {s}.seen") == [(24,)]


def test_records_sealed_on_the_server_are_the_ones_this_process_seals(
    pg_url: str, schema: str
) -> None:
    entries = [
        Entry("tool.intent", "saga-é", {"args": {"card": "4242", "n": [1, 2.5]}, "tool": "pay"}, 7),
        Entry("note", None, {"text": "naïve ✓", "nested": {"b": None, "a": True}}, 8),
        Entry("tool.result", "saga-é", {"result": {"id": "ch_1"}, "status": "ok"}, 9),
    ]
    with PostgresLogStore(pg_url, schema=schema) as store:
        acknowledged = store.append(entries, sync=True) + store.append(entries[:1], sync=False)
        report = store.verify()
        stored = list(store.records())
        facts = store.describe()
    assert report.ok
    assert report.records == 4
    assert stored == acknowledged
    assert [r.salts is not None for r in stored] == [True, False, True, True]
    assert stored[0].salts != stored[3].salts  # salts drawn once per append, then kept
    assert facts["keyed_chain"] is False


def test_a_keyed_chain_is_sealed_by_the_writer(pg_url: str, schema: str) -> None:
    with PostgresLogStore(pg_url, schema=schema, key=b"k" * 32) as store:
        records = [
            store.append([Entry("t.step", "x", {"i": i}, i)], sync=True)[0] for i in range(3)
        ]
        report = store.verify()
    assert report.ok
    assert [r.seq for r in records] == [1, 2, 3]
    assert Chain(b"k" * 32).keyed
    assert records[0].prev == GENESIS


def test_a_batch_whose_commit_is_unknown_is_found_or_written_once(pg_url: str, schema: str) -> None:
    lost = [[Entry("t.step", "a", {"i": 1}, 1), Entry("t.step", "a", {"i": 2}, 2)]]
    unsent = [[Entry("t.step", "a", {"i": 4}, 4)]]
    with (
        psycopg.connect(pg_url, autocommit=True) as conn,
        PostgresLogStore(pg_url, schema=schema) as store,
    ):
        q = queries(schema, store.owner_id, 15.0)
        committed, _ = ServerSealWriter(q, schema, Chain(), (0, GENESIS)).write(conn, lost, False)
        store.append([Entry("t.step", "b", {"i": 3}, 3)], sync=True)  # another writer's
        # the writer whose connection broke after sending ``lost`` (no salts: the same bytes)
        writer = ServerSealWriter(q, schema, Chain(), (0, GENESIS))
        again = writer.retry(conn, lost, False, Unknown("broke", PreparedBatch(lost)))
        written = writer.retry(conn, unsent, True, Unknown("broke", PreparedBatch(unsent)))
        report = store.verify()
    assert report.ok
    assert report.records == 4
    assert again == (committed, False)  # found: nothing written twice
    assert isinstance(written[0][0], list)
    assert [r.seq for r in written[0][0]] == [4]
    assert written[1] is True


def test_an_owner_expired_after_its_batch_committed_acknowledges_nothing(
    pg_url: str, schema: str
) -> None:
    # The second store's batch is sealed on the server (the first moved the tail); a trigger
    # expires its owner inside the batch's transaction, so the heartbeat that should flush past
    # the batch finds no live owner: nothing waited for the flush, so nothing is acknowledged.
    with (
        PostgresLogStore(pg_url, schema=schema) as first,
        PostgresLogStore(pg_url, schema=schema) as second,
    ):
        first.append([Entry("t.step", "a", {"i": 1}, 1)], sync=True)
        run(
            pg_url,
            schema,
            "CREATE FUNCTION {s}.expire() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            " UPDATE {s}.owners SET expires_at = clock_timestamp() - interval '1 second'"
            f" WHERE owner_id = '{second.owner_id}'; RETURN NULL; END $$;"
            " CREATE TRIGGER expire AFTER INSERT ON {s}.records"
            " FOR EACH STATEMENT EXECUTE FUNCTION {s}.expire()",
        )
        with pytest.raises(StoreFailedError, match="owner expired after the batch committed"):
            second.append([Entry("t.step", "b", {"i": 2}, 2)], sync=True)
        with pytest.raises(StoreFailedError, match="owner expired after the batch committed"):
            second.append([Entry("t.step", "b", {"i": 3}, 3)], sync=True)
        report = first.verify()
    assert report.ok
    assert report.records == 2  # the batch committed, unacknowledged
