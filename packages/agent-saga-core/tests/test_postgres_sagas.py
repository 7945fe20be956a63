"""The PostgreSQL log at scale: a saga, and the unfinished sagas, found without a full scan.

The open path's statements and the saga reads must use indexes (EXPLAIN shows no sequential
scan of the log's table on a table of a few thousand rows, analysed); what they return must be
what a full read returns; a table written by an earlier version (no ``saga``/``kind``) is
filled in once; an index hint that points at another saga's row is refused.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from agent_saga import CorruptLogError, Entry
from agent_saga._history.sagareads import unfinished_sagas
from agent_saga._postgres.store import PostgresLogStore
from psycopg import sql

SAGAS = 250
"""Sagas of 12 records (3,000 rows) plus a few unfinished ones."""


def run(url: str, schema: str, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(sql.SQL(query).format(s=sql.Identifier(schema)), params)
        return cursor.fetchall() if cursor.description else []


def saga_entries(n: int, *, end: bool = True) -> list[Entry]:
    sid = f"saga-{n:05d}"
    entries = [Entry("saga.begin", sid, {"name": f"job {n}"}, n)]
    entries += [Entry("step.intent", sid, {"ordinal": i, "tool": "t"}, n) for i in range(10)]
    if end:
        entries.append(Entry("saga.end", sid, {"status": "committed"}, n))
    return entries


@pytest.fixture
def filled(pg_url: str, schema: str) -> str:
    with PostgresLogStore(pg_url, schema=schema) as store:
        for n in range(0, SAGAS, 25):
            batch = [e for k in range(n, n + 25) for e in saga_entries(k)]
            store.append(batch, sync=False)
        store.append(saga_entries(SAGAS, end=False), sync=True)  # one unfinished saga
        store.append([Entry("note", None, {"n": 1}, 1)], sync=True)
    run(pg_url, schema, "ANALYZE {s}.records")
    return schema


def plan(url: str, schema: str, query: str, params: tuple[Any, ...]) -> str:
    rows = run(url, schema, "EXPLAIN " + query, params)
    return "\n".join(str(r[0]) for r in rows)


def test_the_open_path_and_saga_reads_never_scan_the_log_table(pg_url: str, filled: str) -> None:
    count = run(pg_url, filled, "SELECT count(*) FROM {s}.records")[0][0]
    assert count == SAGAS * 12 + 11 + 1
    statements = [
        ("SELECT seq, hash FROM {s}.records ORDER BY seq DESC LIMIT 1", ()),  # tail
        ("SELECT seq, hash, line FROM {s}.records ORDER BY seq DESC LIMIT 1", ()),  # last
        ("SELECT seq, hash, line FROM {s}.records WHERE seq > %s ORDER BY seq LIMIT %s", (0, 1000)),
        ("SELECT seq, hash, line FROM {s}.records WHERE saga = %s ORDER BY seq", ("saga-00100",)),
        ("SELECT saga FROM {s}.open_sagas ORDER BY seq", ()),
        ("SELECT seq, line FROM {s}.records WHERE kind IS NULL ORDER BY seq LIMIT %s", (1000,)),
    ]
    for query, params in statements:
        shown = plan(pg_url, filled, query, params)
        assert "Seq Scan on records" not in shown, f"{query}\n{shown}"
        assert "records" in shown or "open_sagas" in shown


def test_saga_reads_give_what_a_full_read_gives(pg_url: str, filled: str) -> None:
    with PostgresLogStore(pg_url, schema=filled) as store:
        everything = list(store.records())
        for sid in ("saga-00000", "saga-00137", f"saga-{SAGAS:05d}", "no-such-saga"):
            assert store.saga_records(sid) == [r for r in everything if r.saga == sid]
        assert store.unfinished_saga_ids() == [f"saga-{SAGAS:05d}"]
        assert [v.id for v in unfinished_sagas(store)] == [f"saga-{SAGAS:05d}"]
        store.append([Entry("saga.end", f"saga-{SAGAS:05d}", {"status": "aborted"}, 9)], sync=True)
        assert store.unfinished_saga_ids() == []


def test_a_table_from_an_earlier_version_is_filled_in_once(pg_url: str, filled: str) -> None:
    run(pg_url, filled, "UPDATE {s}.records SET saga = NULL, kind = NULL WHERE seq %% 3 = 0")
    run(pg_url, filled, "DELETE FROM {s}.open_sagas")
    with PostgresLogStore(pg_url, schema=filled) as store:
        everything = list(store.records())
        assert store.unfinished_saga_ids() == [f"saga-{SAGAS:05d}"]
        assert store.saga_records("saga-00042") == [r for r in everything if r.saga == "saga-00042"]
    assert run(pg_url, filled, "SELECT count(*) FROM {s}.records WHERE kind IS NULL")[0][0] == 0


def test_a_row_indexed_under_another_saga_is_refused(pg_url: str, filled: str) -> None:
    run(pg_url, filled, "UPDATE {s}.records SET saga = 'saga-00007' WHERE seq = 40")
    with PostgresLogStore(pg_url, schema=filled) as store, pytest.raises(CorruptLogError) as err:
        store.saga_records("saga-00007")
    assert "saga column does not match" in str(err.value)
