"""The fleet schema's tables and the append check, created on first use.

:func:`ensure_schema` creates whatever is missing under a transaction-scoped advisory lock, so
processes starting together on a new schema take turns. Besides the tables it creates
``<schema>.agent_saga_expect(ok, reason)``, a function that raises ``reason`` (SQLSTATE
``AS001``) unless ``ok`` is true: an append sent as one message uses it to abort itself when
its owner was fenced or the tail it continues has moved. ``PUT`` and ``SEAL_CALL`` (below)
fence, lock and write a batch in one statement whose plans the session keeps (a schema made by
an earlier version may also hold ``agent_saga_seal_fenced_v2``, which this one does not call).

A saga's records are found through the ``saga`` and ``kind`` columns the writer fills beside
each line (index ``(saga, seq)``), and the unfinished sagas through ``open_sagas``, kept by a
statement-level trigger on every insert (a ``saga.begin`` adds its saga, a ``saga.end`` removes
it): neither read scans the log's table. Both are hints checked against the lines they lead
to. A table created by an earlier version gets the columns empty; its rows are filled in once,
found through a partial index of the rows without a ``kind`` (see ``_postgres.sagas``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._log.records import GENESIS, RECORD_VERSION
from .connection import lock_key

if TYPE_CHECKING:
    from .connection import PgConnection

EXPECT_FAILED = "AS001"
"""The SQLSTATE ``agent_saga_expect`` raises."""

_DDL = """
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.records (
    seq bigint PRIMARY KEY CHECK (seq > 0),
    hash text NOT NULL,
    line bytea NOT NULL
);
ALTER TABLE {s}.records ADD COLUMN IF NOT EXISTS saga text;
ALTER TABLE {s}.records ADD COLUMN IF NOT EXISTS kind text;
CREATE INDEX IF NOT EXISTS records_saga_seq ON {s}.records (saga, seq);
CREATE INDEX IF NOT EXISTS records_unindexed ON {s}.records (seq) WHERE kind IS NULL;
CREATE TABLE IF NOT EXISTS {s}.open_sagas (
    saga text PRIMARY KEY,
    seq bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS {s}.owners (
    owner_id text PRIMARY KEY,
    host text NOT NULL,
    pid integer NOT NULL,
    opened_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    expires_at timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS {s}.leases (
    name text PRIMARY KEY,
    holder text NOT NULL,
    token text NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS {s}.kill_switch (
    id smallint PRIMARY KEY CHECK (id = 1),
    halted boolean NOT NULL,
    reason text NOT NULL,
    since double precision,
    changed_at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""
_TABLES = ["records", "owners", "leases", "kill_switch", "open_sagas"]
TRIGGER = "agent_saga_open_sagas"
_OPEN_SAGAS = (
    "CREATE OR REPLACE FUNCTION {s}.agent_saga_open_sagas() RETURNS trigger LANGUAGE plpgsql"
    " AS $$ BEGIN"
    " INSERT INTO {s}.open_sagas (saga, seq) SELECT saga, min(seq) FROM new_rows"
    " WHERE kind = 'saga.begin' AND saga IS NOT NULL GROUP BY saga ON CONFLICT (saga) DO NOTHING;"
    " DELETE FROM {s}.open_sagas o USING new_rows n WHERE n.kind = 'saga.end' AND n.saga = o.saga;"
    " RETURN NULL; END $$"
)
_TRIGGER = (
    "DROP TRIGGER IF EXISTS agent_saga_open_sagas ON {s}.records;"
    " CREATE TRIGGER agent_saga_open_sagas AFTER INSERT ON {s}.records"
    " REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT"
    " EXECUTE FUNCTION {s}.agent_saga_open_sagas()"
)
_EXPECT = (
    "CREATE OR REPLACE FUNCTION {s}.agent_saga_expect(ok boolean, reason text)"
    " RETURNS void LANGUAGE plpgsql AS $$ BEGIN IF ok IS NOT TRUE THEN"
    f" RAISE EXCEPTION USING MESSAGE = reason, ERRCODE = '{EXPECT_FAILED}';"
    " END IF; END $$"
)

SEAL = f"agent_saga_seal_v{RECORD_VERSION}"
"""The function that seals and inserts a batch on the server (named for the record version)."""
_SEAL = (  # constants only: the schema is an identifier bound by format
    f"CREATE OR REPLACE FUNCTION {{s}}.{SEAL}("  # noqa: S608
    "h bytea[], d bytea[], k bytea[], g bytea[], x bytea[], t bigint[], sagas text[], kinds text[])"
    " RETURNS TABLE (tail_seq bigint, tail_hash text, last_hash text, lines_digest text)"
    " LANGUAGE plpgsql AS $$ DECLARE"
    " s bigint; p text; m bytea; ln bytea; dg text; end_ bytea;"
    " seqs bigint[] := '{{}}'; hashes text[] := '{{}}'; lines bytea[] := '{{}}';"
    " BEGIN"
    " SELECT r.seq, r.hash INTO s, p FROM {s}.records r ORDER BY r.seq DESC LIMIT 1;"
    f" IF NOT FOUND THEN s := 0; p := '{GENESIS}'; END IF;"
    " tail_seq := s; tail_hash := p;"
    " FOR i IN 1 .. coalesce(cardinality(h), 0) LOOP"
    " s := s + 1;"
    " end_ := convert_to(',\"seq\":' || s || ',\"ts\":' || t[i]"
    f" || ',\"v\":{RECORD_VERSION}}}}}', 'UTF8');"
    " m := '\\x7b2264617461223a'::bytea || h[i] || ',\"kind\":'::bytea || k[i]"
    " || ',\"prev\":\"'::bytea || convert_to(p, 'UTF8') || '\",\"saga\":'::bytea || g[i];"
    " dg := encode(sha256(decode(p, 'hex') || m || end_), 'hex');"
    " ln := '\\x7b2264617461223a'::bytea || coalesce(d[i], h[i])"
    " || ',\"hash\":\"'::bytea || convert_to(dg, 'UTF8') || '\"'::bytea"
    " || substr(m, octet_length(h[i]) + 9) || coalesce(x[i], ''::bytea) || end_;"
    " seqs[i] := s; hashes[i] := dg; lines[i] := ln; p := dg;"
    " END LOOP;"
    " INSERT INTO {s}.records (seq, hash, line, saga, kind)"
    " SELECT * FROM unnest(seqs, hashes, lines, sagas, kinds);"
    " last_hash := p;"
    " SELECT encode(sha256(coalesce(string_agg(u.l, '\\x0a'::bytea ORDER BY u.o), '')), 'hex')"
    " INTO lines_digest FROM unnest(lines) WITH ORDINALITY AS u(l, o);"
    " RETURN NEXT; END $$"
)

_FENCE_LOCK_BODY = (
    " PERFORM 1 FROM {s}.owners WHERE owner_id = p_owner AND expires_at > clock_timestamp()"
    " FOR KEY SHARE;"
    " IF NOT FOUND THEN"
    f" RAISE EXCEPTION USING MESSAGE = 'owner fenced', ERRCODE = '{EXPECT_FAILED}'; END IF;"
    " PERFORM pg_advisory_xact_lock(p_lock);"
)
PUT = f"agent_saga_put_v{RECORD_VERSION}"
"""Fences the owner, takes the log's lock, checks the tail and inserts rows sealed by the
writer: a known-tail batch as one statement (its plans are kept by the session)."""
_PUT = (  # constants only: the schema is an identifier bound by format
    f"CREATE OR REPLACE FUNCTION {{s}}.{PUT}(p_owner text, p_lock bigint, p_durable boolean,"  # noqa: S608
    " p_seq bigint, p_hash text,"
    " seqs bigint[], hashes text[], lines bytea[], sagas text[], kinds text[])"
    " RETURNS void LANGUAGE plpgsql AS $$ DECLARE s bigint; p text; BEGIN"
    " IF NOT p_durable THEN PERFORM set_config('synchronous_commit', 'off', true); END IF;"
    f"{_FENCE_LOCK_BODY}"
    " SELECT r.seq, r.hash INTO s, p FROM {s}.records r ORDER BY r.seq DESC LIMIT 1;"
    " IF (FOUND AND (s <> p_seq OR p <> p_hash)) OR (NOT FOUND AND p_seq <> 0) THEN"
    f" RAISE EXCEPTION USING MESSAGE = 'tail moved', ERRCODE = '{EXPECT_FAILED}'; END IF;"
    " INSERT INTO {s}.records (seq, hash, line, saga, kind)"
    " SELECT * FROM unnest(seqs, hashes, lines, sagas, kinds);"
    " END $$"
)
SEAL_CALL = f"agent_saga_seal_call_v{RECORD_VERSION}"
"""A batch sealed on the server and, when durable, the owner's heartbeat, as one ``CALL``: the
procedure fences the owner, takes the log's lock and runs ``SEAL`` in a transaction it commits
without waiting for the flush (the lock is released there); then, when ``p_durable``, it
refreshes the owner's row in a second transaction, committed by the ``CALL`` with the session's
``synchronous_commit``, so the statement returns only once the WAL is flushed past the batch.
Its one row is ``SEAL``'s and ``beat``, the rows the heartbeat refreshed (0: the owner expired
after the batch committed, and nothing waited for the flush)."""
_SEAL_CALL = (  # constants only: the schema is an identifier bound by format
    f"CREATE OR REPLACE PROCEDURE {{s}}.{SEAL_CALL}(p_owner text, p_lock bigint,"  # noqa: S608
    " p_ttl double precision, p_durable boolean,"
    " h bytea[], d bytea[], k bytea[], g bytea[], x bytea[], t bigint[], sagas text[],"
    " kinds text[], INOUT tail_seq bigint DEFAULT NULL, INOUT tail_hash text DEFAULT NULL,"
    " INOUT last_hash text DEFAULT NULL, INOUT lines_digest text DEFAULT NULL,"
    " INOUT beat integer DEFAULT 0)"
    " LANGUAGE plpgsql AS $$ BEGIN"
    " PERFORM set_config('synchronous_commit', 'off', true);"
    f"{_FENCE_LOCK_BODY}"
    " SELECT * INTO tail_seq, tail_hash, last_hash, lines_digest"
    f" FROM {{s}}.{SEAL}(h, d, k, g, x, t, sagas, kinds);"
    " COMMIT;"
    " IF p_durable THEN"
    " UPDATE {s}.owners SET expires_at = clock_timestamp() + make_interval(secs => p_ttl)"
    " WHERE owner_id = p_owner AND expires_at > clock_timestamp();"
    " GET DIAGNOSTICS beat = ROW_COUNT;"
    " END IF; END $$"
)
_FUNCTIONS = ["agent_saga_expect", SEAL, PUT, SEAL_CALL]


def ensure_schema(conn: PgConnection, schema: str) -> None:
    """Create the schema's tables and function if any is missing (idempotent; safe to race)."""
    from psycopg import sql

    present = conn.execute(
        "SELECT (SELECT count(*) FROM pg_tables WHERE schemaname = %s AND tablename = ANY(%s)),"
        " (SELECT count(DISTINCT p.proname) = %s FROM pg_proc p"
        " JOIN pg_namespace n ON n.oid = p.pronamespace"
        " WHERE n.nspname = %s AND p.proname = ANY(%s)),"
        " EXISTS (SELECT 1 FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relname = 'records' AND t.tgname = %s)",
        (schema, _TABLES, len(_FUNCTIONS), schema, _FUNCTIONS, schema, TRIGGER),
    ).fetchone()
    if present is not None and present[0] == len(_TABLES) and all(present[1:]):
        return
    ident = sql.Identifier(schema)
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key(schema, "ddl"),))
        for statement in _DDL.split(";"):
            conn.execute(sql.SQL(statement.strip()).format(s=ident))
        conn.execute(sql.SQL(_EXPECT).format(s=ident))
        conn.execute(sql.SQL(_OPEN_SAGAS).format(s=ident))
        conn.execute(sql.SQL(_SEAL).format(s=ident))
        conn.execute(sql.SQL(_PUT).format(s=ident))
        conn.execute(sql.SQL(_SEAL_CALL).format(s=ident))
        for statement in _TRIGGER.split(";"):
            conn.execute(sql.SQL(statement.strip()).format(s=ident))


__all__ = ["EXPECT_FAILED", "PUT", "SEAL", "SEAL_CALL", "TRIGGER", "ensure_schema"]
