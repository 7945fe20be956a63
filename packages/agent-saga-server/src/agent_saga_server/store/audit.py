"""Audit exports over an origin's stored records: disclosure bundles and certify reports.

Both are the core's own computations (:func:`agent_saga.proofs.build_bundle`,
:func:`agent_saga.proofs.certify_records`) run over the records the server holds, under the
origin's latest accepted checkpoint. The chain is checked again from the first record
(:func:`agent_saga.proofs.check_record`) for a report, not trusted from ingest. Both read the
origin's whole log (a cost in proportion to its size).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from agent_saga import CorruptLogError, Record, SagaStatus, VerifyReport, build_history
from agent_saga.proofs import (
    ChainError,
    Checkpoint,
    DisclosureError,
    Finding,
    MerkleTree,
    NoteVerifier,
    build_bundle,
    certify_records,
    check_record,
    open_checkpoint,
    record_leaf,
)

from .db import Database
from .ingest import GENESIS, origin_state, read_records


class AuditUnavailable(Exception):
    """The export cannot be made (no such saga, no checkpoint covering it, ...)."""


def _checkpoint(note: str | None, verifier: str | None) -> Checkpoint | None:
    if note is None or verifier is None:
        return None
    return open_checkpoint(note, [NoteVerifier.parse(verifier)])


def disclosure(db: Database, origin: str, saga: str) -> dict[str, Any]:
    """The disclosure bundle of one saga under the origin's latest accepted checkpoint.

    Raises:
        AuditUnavailable: no checkpoint yet, or the core refuses (unknown or unfinished saga,
            ended after the checkpoint); the message says which.
    """
    with db.transaction(write=False) as tx:
        state = origin_state(tx, origin)
        checkpoint = _checkpoint(state.checkpoint_note, state.verifier)
        if checkpoint is None:
            raise AuditUnavailable(f"no checkpoint received from {origin} yet")
        everything = read_records(tx, origin, upto=checkpoint.size)
    tree = MerkleTree.from_leaf_hashes(record_leaf(r) for r in everything)
    wanted = [r for r in everything if r.saga == saga or r.kind == "log.redaction"]
    try:
        return build_bundle(saga, wanted, tree, checkpoint)
    except DisclosureError as exc:
        raise AuditUnavailable(str(exc)) from None


def _verify(records: list[Record], origin: str) -> VerifyReport:
    prev, count = GENESIS, 0
    for record in records:
        try:
            check_record(record.to_json(), seq=count + 1, prev=prev)
        except ChainError as exc:
            return VerifyReport(False, count, CorruptLogError(origin, count, str(exc), count + 1))
        prev, count = record.hash, count + 1
    return VerifyReport(True, count, None, prev)


def certify(db: Database, origin: str) -> dict[str, Any]:
    """certify's findings over the origin's stored records (unsigned; see the module docstring).

    A saga without a terminal record is reported as the core reports a saga whose owner still
    runs (a warning): the server cannot tell whether the agent is alive.
    """
    with db.transaction(write=False) as tx:
        state = origin_state(tx, origin)
        records = read_records(tx, origin)
    chain = _verify(records, origin)
    problem: Finding | None = None
    checkpoint = _checkpoint(state.checkpoint_note, state.verifier)
    if checkpoint is None:
        problem = Finding("WARNING", "checkpoint", f"no checkpoint received from {origin}")
    else:
        tree = MerkleTree.from_leaf_hashes(record_leaf(r) for r in records[: checkpoint.size])
        if tree.size < checkpoint.size or tree.root(checkpoint.size) != checkpoint.root:
            problem = Finding("CRITICAL", "checkpoint", "the records do not match the checkpoint")
    findings = certify_records(records, chain, problem, lambda owner: True)
    history = build_history(records)
    counts = {"records": len(records), "sagas": len(history.sagas)}
    for status in SagaStatus:
        counts[status.value] = sum(1 for s in history.sagas if s.status is status)
    counts["critical"] = sum(1 for f in findings if f.severity == "CRITICAL")
    counts["warning"] = sum(1 for f in findings if f.severity == "WARNING")
    return {
        "origin": origin,
        "ok": counts["critical"] == 0,
        "records": len(records),
        "checkpoint": state.checkpoint_note,
        "counts": counts,
        "findings": [
            json.loads(json.dumps({k: v for k, v in asdict(f).items() if v is not None}))
            for f in findings
        ],
    }


def conflicts(
    db: Database, origin: str | None, limit: int, after: str | None
) -> list[dict[str, Any]]:
    """Refused records and checkpoints kept as evidence, oldest first."""
    sql = "SELECT id, origin, seq, what, reason, received_at, body FROM conflicts"
    clauses, params = [], []
    if origin is not None:
        clauses.append("origin = ?")
        params.append(origin)
    if after is not None:
        clauses.append("id > ?")
        params.append(after)
    if clauses:
        sql += " WHERE " + " AND ".join(clauses)
    with db.transaction(write=False) as tx:
        rows = tx.all(sql + " ORDER BY id LIMIT ?", [*params, limit])
    keys = ("id", "origin", "seq", "what", "reason", "received_at", "body")
    out = [dict(zip(keys, row, strict=True)) for row in rows]
    for item in out:
        item["body"] = json.loads(item["body"])
    return out


__all__ = ["AuditUnavailable", "certify", "conflicts", "disclosure"]
