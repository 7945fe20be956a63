"""Redaction on the PostgreSQL log (fleet mode), against a real server: the same guarantees as
the file log. A masked row keeps its hash; a row masked or rewritten by someone without an
administrator key is refused by every reader.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from agent_saga import AgentKit, CorruptLogError, SequentialIds, compensator, tool
from agent_saga._log.admins import trusting_admins
from agent_saga._log.chain import Chain, parse_line
from agent_saga._log.records import Record
from agent_saga._postgres.store import PostgresLogStore
from agent_saga.proofs._masking import mask_record
from agent_saga.proofs._redact_pg import redact_postgres
from psycopg import sql

CVV = "731"


@compensator("pgredact.refund")
def refund(result: str) -> None:
    return None


@tool(name="pgredact.charge", compensate="pgredact.refund")
def charge(card: dict[str, str], cents: int) -> str:
    return f"ch_{cents}"


def rows(url: str, schema: str) -> list[tuple[int, str, bytes]]:
    with psycopg.connect(url) as conn:
        query = sql.SQL("SELECT seq, hash, line FROM {} ORDER BY seq")
        found = conn.execute(query.format(sql.Identifier(schema, "records"))).fetchall()
    return [(int(s), str(h), bytes(line)) for s, h, line in found]


def set_line(url: str, schema: str, seq: int, line: bytes) -> None:
    with psycopg.connect(url) as conn:
        query = sql.SQL("UPDATE {} SET line = %s WHERE seq = %s")
        conn.execute(query.format(sql.Identifier(schema, "records")), (line, seq))


def paid(url: str, schema: str, home: Path) -> None:
    """Two sagas in the PostgreSQL log."""
    store = PostgresLogStore(url, schema=schema)
    with AgentKit(home=home, store=store, ids=SequentialIds(), checkpoints=False) as kit:
        for cents in (100, 200):
            with kit.transaction("buy"):
                charge({"number": "4111", "cvv": CVV}, cents)


def records_of(url: str, schema: str) -> list[Record]:
    with PostgresLogStore(url, schema=schema) as store:
        return list(store.records())


def test_masking_rows_keeps_their_hashes_while_an_agent_keeps_writing(
    pg_url: str, schema: str, home: Path, admin_key: Path
) -> None:
    paid(pg_url, schema, home)
    store = PostgresLogStore(pg_url, schema=schema)  # an agent's, open during the redaction
    before = {seq: digest for seq, digest, _ in rows(pg_url, schema)}
    report = redact_postgres(
        pg_url, "args.card.cvv", admin_key=admin_key, schema=schema, reason="PCI"
    )
    assert sorted(report.masked) == [2, 6]
    after = rows(pg_url, schema)
    assert all(f'"{CVV}"'.encode() not in line for _, _, line in after)
    assert {seq: digest for seq, digest, _ in after if seq in before} == before
    assert after[-1][0] == report.record_seq
    with AgentKit(home=home, store=store, checkpoints=False) as kit, kit.transaction("buy"):
        charge({"number": "4111", "cvv": "000"}, 300)  # the same chain continues
    with PostgresLogStore(pg_url, schema=schema) as reader:
        assert reader.verify().ok
        args: Any = list(reader.records())[1].data["args"]
    assert args["cents"] == 100
    assert args["card"]["number"] == "4111"  # only the CVV was masked
    assert set(args["card"]["cvv"]) == {"$redacted"}


def test_rows_masked_or_rewritten_without_an_administrator_fail_every_reader(
    pg_url: str, schema: str, home: Path, admin_key: Path
) -> None:
    paid(pg_url, schema, home)
    seq, _, line = rows(pg_url, schema)[1]
    record = parse_line(Chain(), line, seq, prev_hash(pg_url, schema, seq))
    assert isinstance(record, Record)
    masked = mask_record(record, ("args", "card", "cvv"))
    assert masked is not None
    set_line(pg_url, schema, seq, masked[0])  # masked correctly, but nobody signed for it
    with pytest.raises(CorruptLogError, match="no signed redaction record accounts for them"):
        records_of(pg_url, schema)
    set_line(pg_url, schema, seq, line.replace(b'"cents":100', b'"cents":1'))
    with pytest.raises(CorruptLogError, match="hash does not match"):
        records_of(pg_url, schema)


def test_an_untrusted_redaction_is_refused(
    pg_url: str, schema: str, home: Path, admin_key: Path
) -> None:
    paid(pg_url, schema, home)
    redact_postgres(pg_url, "args.card.cvv", admin_key=admin_key, schema=schema)
    assert len(records_of(pg_url, schema)) == 9
    with trusting_admins([]), pytest.raises(CorruptLogError, match="not a trusted administrator"):
        records_of(pg_url, schema)


def test_the_administrator_key_must_be_trusted_before_it_signs(
    pg_url: str, schema: str, home: Path, admin_key: Path
) -> None:
    from agent_saga import ConfigurationError

    paid(pg_url, schema, home)
    unchanged = rows(pg_url, schema)
    with trusting_admins([]), pytest.raises(ConfigurationError, match="is not trusted"):
        redact_postgres(pg_url, "args.card.cvv", admin_key=admin_key, schema=schema)
    assert rows(pg_url, schema) == unchanged


def prev_hash(url: str, schema: str, seq: int) -> str:
    previous: dict[int, Any] = {s: h for s, h, _ in rows(url, schema)}
    return str(previous[seq - 1])


def test_the_redaction_record_is_stored_with_its_kind_so_no_reader_rescans_the_table(
    pg_url: str, schema: str, home: Path, admin_key: Path
) -> None:
    paid(pg_url, schema, home)
    report = redact_postgres(pg_url, "args.card.cvv", admin_key=admin_key, schema=schema)
    with psycopg.connect(pg_url) as conn:
        query = sql.SQL("SELECT seq, saga, kind FROM {} WHERE kind IS NULL OR seq = %s")
        found = conn.execute(
            query.format(sql.Identifier(schema, "records")), (report.record_seq,)
        ).fetchall()
    assert found == [(report.record_seq, None, "log.redaction")]
