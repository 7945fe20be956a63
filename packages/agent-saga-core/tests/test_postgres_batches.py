"""Group commit on the PostgreSQL log store: threads share transactions, nothing else is shared.

Each row's ``xmin`` is the transaction that inserted it, so counting them shows how many
transactions a set of appends took. The server is the conftest's ``pg_url``.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest
from agent_saga import ConfigurationError, Entry, StoreFailedError
from agent_saga._log.codec import CodecError
from agent_saga._postgres.store import PostgresLogStore
from psycopg import sql


def rows(url: str, schema: str, query: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(sql.SQL(query).format(s=sql.Identifier(schema))).fetchall()


def in_threads(count: int, work: Any) -> None:
    threads = [threading.Thread(target=work, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def test_threads_of_one_store_share_transactions_and_keep_their_order(
    pg_url: str, schema: str
) -> None:
    got: dict[int, list[int]] = {}
    with PostgresLogStore(pg_url, schema=schema) as store:

        def work(n: int) -> None:
            got[n] = [
                store.append([Entry("t.step", f"s{n}", {"n": n, "i": i}, i)], sync=True)[0].seq
                for i in range(12)
            ]

        in_threads(16, work)
        report = store.verify()
        records = list(store.records())
    assert report.ok
    assert report.records == 16 * 12
    transactions = rows(pg_url, schema, "SELECT count(DISTINCT xmin::text) FROM {s}.records")
    assert transactions[0][0] < 16 * 12  # appends shared transactions
    for n, seqs in got.items():
        assert seqs == sorted(seqs)
        assert [r.data["i"] for r in records if r.saga == f"s{n}"] == list(range(12))


def test_an_entry_that_cannot_be_sealed_fails_alone(pg_url: str, schema: str) -> None:
    refused: list[int] = []
    with PostgresLogStore(pg_url, schema=schema) as store:

        def work(n: int) -> None:
            for i in range(10):
                value = float("nan") if (n + i) % 3 == 0 else float(i)
                try:
                    store.append([Entry("t.step", f"s{n}", {"v": value}, i)], sync=i % 2 == 0)
                except CodecError:
                    refused.append(n)

        in_threads(8, work)
        assert store.health() == []
        report = store.verify()
    assert len(refused) == sum((n + i) % 3 == 0 for n in range(8) for i in range(10))
    assert report.ok
    assert report.records == 80 - len(refused)


def test_a_known_tail_that_moved_is_read_again(pg_url: str, schema: str) -> None:
    with (
        PostgresLogStore(pg_url, schema=schema) as a,
        PostgresLogStore(pg_url, schema=schema) as b,
    ):
        seqs = [
            s.append([Entry("t.step", "x", {"i": i}, i)], sync=True)[0].seq
            for i, s in enumerate([a, a, b, a, b, b, a])
        ]
        report = a.verify()
    assert seqs == list(range(1, 8))
    assert report.ok


def test_an_owner_declared_dead_cannot_append_on_the_one_message_path(
    pg_url: str, schema: str
) -> None:
    with PostgresLogStore(pg_url, schema=schema) as store:
        store.append([Entry("t.step", "x", {"i": 1}, 1)], sync=True)  # the tail is known now
        rows(pg_url, schema, "DELETE FROM {s}.owners RETURNING 1")  # another host's verdict
        with pytest.raises(StoreFailedError, match="owner fenced"):
            store.append([Entry("t.step", "x", {"i": 2}, 2)], sync=False)
        with pytest.raises(StoreFailedError):
            store.append([Entry("t.step", "x", {"i": 3}, 3)], sync=True)
    assert rows(pg_url, schema, "SELECT count(*) FROM {s}.records") == [(1,)]


def test_an_owner_declared_dead_cannot_append_on_the_server_sealed_path(
    pg_url: str, schema: str
) -> None:
    with (
        PostgresLogStore(pg_url, schema=schema) as a,
        PostgresLogStore(pg_url, schema=schema) as b,
    ):
        a.append([Entry("t.step", "a", {"i": 1}, 1)], sync=True)
        b.append([Entry("t.step", "b", {"i": 1}, 1)], sync=True)  # a's known tail moved
        a.append([Entry("t.step", "a", {"i": 2}, 2)], sync=True)  # sealed on the server
        rows(
            pg_url,
            schema,
            "DELETE FROM {s}.owners WHERE owner_id = '" + a.owner_id + "' RETURNING 1",
        )
        with pytest.raises(StoreFailedError, match="owner fenced"):
            a.append([Entry("t.step", "a", {"i": 3}, 3)], sync=True)
        b.append([Entry("t.step", "b", {"i": 2}, 2)], sync=True)
        assert b.verify().ok
    assert rows(pg_url, schema, "SELECT count(*) FROM {s}.records") == [(4,)]


def test_a_schema_without_the_append_functions_gets_them_when_a_store_opens(
    pg_url: str, schema: str
) -> None:
    with PostgresLogStore(pg_url, schema=schema) as store:
        store.append([Entry("t.step", "x", {"i": 1}, 1)], sync=True)
    with psycopg.connect(pg_url, autocommit=True) as conn:  # as an earlier version left it
        conn.execute(
            sql.SQL("DROP ROUTINE {s}.agent_saga_put_v2, {s}.agent_saga_seal_call_v2").format(
                s=sql.Identifier(schema)
            )
        )
    with PostgresLogStore(pg_url, schema=schema) as store:
        store.append([Entry("t.step", "x", {"i": 2}, 2)], sync=True)
        assert store.verify().ok
    assert rows(pg_url, schema, "SELECT count(*) FROM {s}.records") == [(2,)]


def test_one_connection_per_store_commits_its_flushes_and_heartbeats_on_it(
    pg_url: str, schema: str
) -> None:
    def sessions() -> int:  # the backends whose last statement touched this schema
        with psycopg.connect(pg_url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'agent-saga'"
                " AND position(%s in query) > 0",
                (schema,),
            ).fetchone()
            return int(row[0]) if row else -1

    seen = []
    for connections in (2, 1):
        with PostgresLogStore(pg_url, schema=schema, connections=connections, owner_ttl=0.6) as s:
            s.append([Entry("t.step", "x", {"n": connections}, 1)], sync=False)
            s.sync()  # a flush on the flusher's connection
            time.sleep(0.8)  # heartbeats every 0.2 s keep the owner alive past its ttl
            count = sessions()
            with PostgresLogStore(pg_url, schema=schema) as other:
                seen.append((count, other.owner_alive(s.owner_id)))
    assert seen == [(2, True), (1, True)]
    with pytest.raises(ConfigurationError, match="connections must be 1 or 2"):
        PostgresLogStore(pg_url, schema=schema, connections=3)


def test_a_batch_interrupted_between_its_round_trips_leaves_no_lock_behind(
    pg_url: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C (or any BaseException) after the read of the tail, which took the log's lock in
    an open transaction: the store fails, and its session is closed so the server rolls back;
    another process's store appends at once instead of waiting for this one to exit."""
    from agent_saga._postgres import write

    real = write.Sealed

    class Interrupted(real):  # type: ignore[misc, valid-type]
        def __init__(self, *args: object) -> None:
            raise KeyboardInterrupt

    store = PostgresLogStore(pg_url, schema=schema, key=b"k" * 32, connections=1)
    try:
        writer = store._commit._writer
        assert isinstance(writer, write.BatchWriter)  # a keyed chain seals in the process
        writer.tail = None  # the two-round-trip path: read the tail, then write
        monkeypatch.setattr(write, "Sealed", Interrupted)
        with pytest.raises(KeyboardInterrupt):
            store.append([Entry("t.step", "x", {"n": 1}, 1)], sync=False)
        monkeypatch.setattr(write, "Sealed", real)
        assert (
            rows(
                pg_url,
                schema,
                "SELECT 1 FROM pg_stat_activity WHERE state = "
                "'idle in transaction' AND application_name = 'agent-saga'",
            )
            == []
        )
        appended: list[int] = []

        def other_process() -> None:
            with PostgresLogStore(pg_url, schema=schema, key=b"k" * 32) as other:
                appended.extend(r.seq for r in other.append([Entry("t.s", "y", {}, 2)], sync=True))

        thread = threading.Thread(target=other_process, daemon=True)
        thread.start()
        thread.join(timeout=15)
        assert appended == [1]  # not blocked behind a lock the interrupted batch kept
        with pytest.raises(StoreFailedError):
            store.append([Entry("t.step", "x", {"n": 3}, 3)], sync=False)
    finally:
        store.close()
