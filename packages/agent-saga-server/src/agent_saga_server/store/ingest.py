"""Receiving an origin's log records: batches, idempotent by (origin, seq), chains checked.

A batch is all or nothing. Inside one transaction, with the origin's row locked:

* a record at a ``seq`` already stored must be identical to the stored one (a retried or
  replayed batch is a no-op); a different one is a conflict;
* the first new record must be ``last_seq + 1`` and every new record must continue the chain
  (:func:`agent_saga.proofs.check_records`: fields, canonical values, ``seq``, ``prev``, hash);
* the new records are inserted (one ``executemany``, their data as the canonical bytes the
  check produced), the sagas they touch are summarised for listing
  (:mod:`.summaries`), and the origin's tail advances.

A rejected batch changes nothing, and the refused records are kept in ``conflicts`` as
evidence (in a transaction of their own), with why.

The chain check, most of a batch's cost (about 25 us a record), runs before the writing
transaction, against the origin's tail as a read saw it, so the database's write lock (every
writer of a SQLite database, an approval's vote too) is not held meanwhile. Inside the
transaction the locked tail must still be the one checked against; when another batch of the
origin moved it meanwhile, the batch is checked again there. What is stored is therefore
always checked against the tail it continues.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agent_saga import Record
from agent_saga.proofs import ChainError, check_records

from .db import Database, Tx
from .summaries import summarise

GENESIS = "0" * 64


class IngestRefused(Exception):
    """A batch was refused; ``status`` is the HTTP status it maps to (409 or 422)."""

    def __init__(self, status: int, message: str, *, expected_seq: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.expected_seq = expected_seq


@dataclass(frozen=True)
class OriginState:
    """What the server holds of one origin's log."""

    origin: str
    last_seq: int
    last_hash: str
    checkpoint_size: int
    checkpoint_note: str | None
    verifier: str | None


@dataclass(frozen=True)
class IngestResult:
    accepted: int
    duplicates: int
    last_seq: int
    last_hash: str


def canonical_text(value: Any) -> str:
    """Compact JSON with sorted keys (how record data is kept in the database)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def origin_state(tx: Tx, origin: str, *, lock: bool = False) -> OriginState:
    row = tx.one(
        "SELECT last_seq, last_hash, checkpoint_size, checkpoint_note, verifier FROM origins "
        "WHERE origin = ?" + (tx.lock_rows() if lock else ""),
        (origin,),
    )
    if row is None:
        return OriginState(origin, 0, GENESIS, 0, None, None)
    return OriginState(origin, int(row[0]), str(row[1]), int(row[2]), row[3], row[4])


def ensure_origin(tx: Tx, origin: str) -> None:
    tx.execute(
        "INSERT INTO origins (origin, last_seq, last_hash, keyed, checkpoint_size, updated_at) "
        "VALUES (?, 0, ?, 0, 0, ?) ON CONFLICT (origin) DO NOTHING",
        (origin, GENESIS, time.time()),
    )


def keep_evidence(
    db: Database, origin: str, seq: int | None, what: str, reason: str, body: Any, token: str
) -> None:
    """Store a refused record or checkpoint with why (never raises on its content)."""
    ident = f"{time.time_ns():020d}-{secrets.token_hex(4)}"
    text = canonical_text(body)[: 4 * 1024 * 1024]
    with db.transaction() as tx:
        tx.execute(
            "INSERT INTO conflicts (id, origin, seq, what, reason, body, received_at, token_id) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (ident, origin, seq, what, reason[:1000], text, time.time(), token),
        )


def ingest(db: Database, origin: str, batch: Sequence[dict[str, Any]], token: str) -> IngestResult:
    """Store ``batch`` (record objects in ``seq`` order) for ``origin``; see the module docstring.

    Raises:
        IngestRefused: 409 for a record that differs from the stored one at its ``seq`` or that
            does not continue the stored chain; 422 for a gap, a batch out of order or a record
            that is not a valid record. Nothing of the batch is stored then.
    """
    try:
        checked = _check_ahead(db, origin, batch)
        with db.transaction() as tx:
            return _ingest(tx, origin, batch, checked)
    except IngestRefused as refused:
        body = {"records": list(batch), "expected_seq": refused.expected_seq}
        keep_evidence(db, origin, _first_seq(batch), "records", str(refused), body, token)
        raise


def _first_seq(batch: Sequence[dict[str, Any]]) -> int | None:
    seq = batch[0].get("seq") if batch else None
    return seq if type(seq) is int else None


@dataclass(frozen=True)
class _Checked:
    """The new records of a batch, checked against the tail ``(last_seq, last_hash)``."""

    last_seq: int
    last_hash: str
    fresh: list[tuple[Record, bytes]]


def _check_ahead(db: Database, origin: str, batch: Sequence[dict[str, Any]]) -> _Checked | None:
    """The batch's records after the origin's tail as a read sees it now, checked; ``None``
    when that is not simply so (a bad batch, records already stored, another tail): the
    writing transaction then decides, and says why, as it always did."""
    with db.transaction(write=False) as tx:
        state = origin_state(tx, origin)
    first = batch[0].get("seq") if batch else None
    if type(first) is not int or first != state.last_seq + 1:
        return None
    try:
        fresh = check_records(batch, seq=first, prev=state.last_hash)
    except ChainError:
        return None
    return _Checked(state.last_seq, state.last_hash, fresh)


def _ingest(
    tx: Tx, origin: str, batch: Sequence[dict[str, Any]], checked: _Checked | None = None
) -> IngestResult:
    ensure_origin(tx, origin)
    state = origin_state(tx, origin, lock=True)
    seqs = [obj.get("seq") for obj in batch]
    if any(type(s) is not int for s in seqs):
        raise IngestRefused(422, "every record has an integer seq")
    first = int(batch[0]["seq"])
    if seqs != list(range(first, first + len(seqs))):
        raise IngestRefused(422, "a batch holds consecutive records in seq order")
    if first < 1 or first > state.last_seq + 1:
        raise IngestRefused(
            422,
            f"records must continue at seq {state.last_seq + 1}, the batch starts at {first}",
            expected_seq=state.last_seq + 1,
        )
    known = [obj for obj in batch if obj["seq"] <= state.last_seq]
    _check_duplicates(tx, origin, known)
    tail = (state.last_seq, state.last_hash)
    if checked is not None and (checked.last_seq, checked.last_hash) == tail:
        fresh = checked.fresh  # checked before the lock, against this same tail
    else:
        try:
            fresh = check_records(batch[len(known) :], seq=tail[0] + 1, prev=tail[1])
        except ChainError as exc:
            status = 409 if "prev does not match" in str(exc) else 422
            raise IngestRefused(status, str(exc), expected_seq=tail[0] + 1) from None
    if fresh:
        _store(tx, origin, fresh)
    last = fresh[-1][0] if fresh else None
    return IngestResult(
        len(fresh),
        len(known),
        last.seq if last else state.last_seq,
        last.hash if last else state.last_hash,
    )


def _check_duplicates(tx: Tx, origin: str, known: list[dict[str, Any]]) -> None:
    if not known:
        return
    rows = tx.all(
        "SELECT seq, ts, kind, saga, hash, prev, data, v, salts FROM records WHERE origin = ? "
        "AND seq >= ? AND seq <= ? ORDER BY seq",
        (origin, known[0]["seq"], known[-1]["seq"]),
    )
    stored = {int(row[0]): row for row in rows}
    for obj in known:
        row = stored.get(obj["seq"])
        fields = (
            obj.get("ts"), obj.get("kind"), obj.get("saga"), obj.get("hash"), obj.get("prev"),
        )  # fmt: skip
        same = row is not None and (
            fields == (row[1], row[2], row[3], row[4], row[5])
            and _data_text(obj.get("data")) == row[6]
            and (obj.get("v"), obj.get("salts")) == (row[7], row[8])
            and set(obj) - {"salts"} == _RECORD_FIELDS
            and ("salts" in obj) == (row[8] is not None)
        )
        if not same:
            raise IngestRefused(
                409,
                f"record {obj['seq']} differs from the one already stored at that seq",
                expected_seq=None,
            )


def _data_text(data: Any) -> str | None:
    try:
        return canonical_text(data)
    except (TypeError, ValueError):
        return None


_RECORD_FIELDS = frozenset({"v", "seq", "ts", "kind", "saga", "data", "prev", "hash"})
_INSERT_RECORD = (
    "INSERT INTO records (origin, seq, ts, kind, saga, hash, prev, data, v, salts) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_UPSERT_SAGA = (
    "INSERT INTO sagas (origin, saga, name, status, started, ended, first_seq, last_seq) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (origin, saga) DO UPDATE SET "
    "name = CASE WHEN excluded.name <> '' THEN excluded.name ELSE sagas.name END, "
    "status = CASE WHEN excluded.ended IS NOT NULL THEN excluded.status ELSE sagas.status END, "
    "ended = COALESCE(excluded.ended, sagas.ended), last_seq = excluded.last_seq"
)
_INSERT_TOOL = (
    "INSERT INTO saga_tools (origin, saga, tool) VALUES (?, ?, ?) "
    "ON CONFLICT (origin, saga, tool) DO NOTHING"
)
_INSERT_KNOWN_TOOL = "INSERT INTO known_tools (tool) VALUES (?) ON CONFLICT (tool) DO NOTHING"


def _store(tx: Tx, origin: str, fresh: list[tuple[Record, bytes]]) -> None:
    """Insert checked records (each with its data's canonical bytes), their sagas' summaries
    and the origin's new tail: a few statements per batch, none per record."""
    rows = [
        (origin, r.seq, r.ts, r.kind, r.saga, r.hash, r.prev, data.decode(), r.v, r.salts)
        for r, data in fresh
    ]
    tx.execute_many(_INSERT_RECORD, rows)
    records = [r for r, _ in fresh]
    sagas: list[tuple[Any, ...]] = []
    tools: set[tuple[str, str, str]] = set()
    for summary in summarise(records):
        sagas.append(
            (
                origin, summary.saga, summary.name, summary.status, summary.started,
                summary.ended, summary.first_seq, summary.last_seq,
            )
        )  # fmt: skip
        tools.update((origin, summary.saga, tool) for tool in summary.tools.values())
    tx.execute_many(_UPSERT_SAGA, sagas)
    tx.execute_many(_INSERT_TOOL, sorted(tools))
    tx.execute_many(_INSERT_KNOWN_TOOL, sorted({(tool,) for _, _, tool in tools}))
    decided = [
        (str(r.data.get("decision")), str(r.data.get("request")), origin)
        for r in records
        if r.kind == "approval.decided"
    ]
    tx.execute_many("UPDATE approvals SET outcome = ? WHERE id = ? AND origin = ?", decided)
    last = records[-1]
    tx.execute(
        "UPDATE origins SET last_seq = ?, last_hash = ?, updated_at = ? WHERE origin = ?",
        (last.seq, last.hash, time.time(), origin),
    )


def read_records(
    tx: Tx,
    origin: str,
    *,
    saga: str | None = None,
    kind: str | None = None,
    upto: int | None = None,
) -> list[Record]:
    """The stored records of ``origin``, in seq order: of one saga, or with ``kind`` given and
    no saga, the log's own records of that kind (``saga.settled``, ``log.redaction``, ...);
    up to a seq."""
    sql = "SELECT seq, ts, kind, saga, data, prev, hash, salts, v FROM records WHERE origin = ?"
    params: list[Any] = [origin]
    if saga is not None:
        sql += " AND saga = ?"
        params.append(saga)
    if kind is not None:
        sql += " AND kind = ?" + ("" if saga is not None else " AND saga IS NULL")
        params.append(kind)
    if upto is not None:
        sql += " AND seq <= ?"
        params.append(upto)
    rows = tx.all(sql + " ORDER BY seq", params)
    return [
        Record(int(s), int(ts), str(k), sg, json.loads(d), str(p), str(h), sl, int(v))
        for s, ts, k, sg, d, p, h, sl, v in rows
    ]


__all__ = [
    "GENESIS",
    "IngestRefused",
    "IngestResult",
    "OriginState",
    "canonical_text",
    "ensure_origin",
    "ingest",
    "keep_evidence",
    "origin_state",
    "read_records",
]
