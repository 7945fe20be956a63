"""Attacks on server-side sealing by a PostgreSQL user who can write the agent's schema: the
seal function replaced by one that returns another hash, by one that stores other records and
returns the hashes this process expects, or dropped. No append may be acknowledged for records
the server did not store as this process sealed them, once the process can tell."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from agent_saga import Entry, StoreFailedError
from agent_saga._postgres.schema import _SEAL, SEAL
from agent_saga._postgres.store import PostgresLogStore
from psycopg import sql

_ARGS = (
    "h bytea[], d bytea[], k bytea[], g bytea[], x bytea[], t bigint[], sagas text[], kinds text[]"
)


def run(url: str, schema: str, statement: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL(statement).format(s=sql.Identifier(schema)))


def step(i: int) -> list[Entry]:
    return [Entry("t.step", "a", {"i": i}, i)]


def moved(pg_url: str, schema: str) -> None:
    """Another process's writer appends: the next batch of a store is sealed on the server."""
    with PostgresLogStore(pg_url, schema=schema) as other:
        other.append([Entry("t.other", "b", {}, 0)], sync=True)


def test_a_function_returning_another_hash_fails_the_store(pg_url: str, schema: str) -> None:
    with PostgresLogStore(pg_url, schema=schema) as store:
        store.append(step(1), sync=True)
        moved(pg_url, schema)
        run(pg_url, schema, _SEAL.replace("last_hash := p;", "last_hash := md5(p) || md5(p);"))
        with pytest.raises(StoreFailedError, match="sealed records 3-3 otherwise"):
            store.append(step(2), sync=True)
        with pytest.raises(StoreFailedError):
            store.append(step(3), sync=True)


def test_a_dropped_function_fails_the_append_in_one_line(pg_url: str, schema: str) -> None:
    with PostgresLogStore(pg_url, schema=schema) as store:
        store.append(step(1), sync=True)
        moved(pg_url, schema)
        run(pg_url, schema, f"DROP FUNCTION {{s}}.{SEAL}")
        with pytest.raises(StoreFailedError, match=f"append failed: .*{SEAL}") as failed:
            store.append(step(2), sync=True)
        assert "\n" not in str(failed.value).strip()
    with PostgresLogStore(pg_url, schema=schema) as store:  # a new store puts it back
        assert [r.seq for r in store.append(step(2), sync=True)] == [3]


def _forger(pg_url: str, schema: str) -> None:
    """Replace the seal function by one that computes what the caller expects (the honest
    function, its insert left out) but stores a valid chain of records whose ``i`` is 9."""
    honest = _SEAL.replace(SEAL, "honest_seal").replace(
        " INSERT INTO {s}.records (seq, hash, line, saga, kind)"
        " SELECT * FROM unnest(seqs, hashes, lines, sagas, kinds);",
        "",
    )
    run(pg_url, schema, _SEAL.replace(SEAL, "stored_seal"))
    run(pg_url, schema, honest)
    alter = (
        "array(SELECT convert_to(replace(convert_from(e, 'UTF8'), '\"i\":', '\"i\":9'),"
        " 'UTF8') FROM unnest({a}) e)"
    )
    forged = (
        f"CREATE OR REPLACE FUNCTION {{s}}.{SEAL}({_ARGS}) RETURNS TABLE (tail_seq bigint,"
        " tail_hash text, last_hash text, lines_digest text) LANGUAGE plpgsql AS $$ BEGIN"
        " RETURN QUERY SELECT * FROM {s}.honest_seal(h, d, k, g, x, t, sagas, kinds);"
        f" PERFORM * FROM {{s}}.stored_seal({alter.format(a='h')}, {alter.format(a='d')},"
        " k, g, x, t, sagas, kinds); END $$"
    )
    run(pg_url, schema, forged)


def test_records_stored_otherwise_than_acknowledged_fail_the_writers_next_batch(
    pg_url: str, schema: str
) -> None:
    with PostgresLogStore(pg_url, schema=schema) as store:
        store.append(step(1), sync=True)
        moved(pg_url, schema)
        _forger(pg_url, schema)
        # The server now lies in a way no process can see in the batch itself (it computes
        # what the process expects): this append is acknowledged, its stored record differs.
        acknowledged: list[Any] = store.append(step(2), sync=True)
        seq = acknowledged[0].seq
        stored = [r for r in store.records() if r.seq == seq]
        assert [r.data for r in acknowledged] == [{"i": 2}]
        assert [r.data for r in stored] == [{"i": 92}]
        # The next batch finds the tail it left holding another hash: the store fails.
        with pytest.raises(StoreFailedError, match=f"record {seq} is stored otherwise"):
            store.append(step(3), sync=True)
