"""Receiving an origin's signed checkpoints: accepted only as an extension of the last one.

A checkpoint is accepted when, with the origin's row locked:

1. it is signed by the origin's checkpoint key (given with the first checkpoint and fixed from
   then on; a checkpoint under another key is refused);
2. the server holds the records it covers, and the Merkle root of the stored records equals
   the checkpoint's root (so it commits to exactly what the server received);
3. a consistency proof from the last accepted checkpoint verifies
   (:func:`agent_saga.proofs.check_extension`): a smaller size, another root for the same size
   or a failing proof is a fork.

Refusals are kept in ``conflicts`` as evidence. Accepting the same checkpoint again is a no-op.
Computing the root reads the origin's stored record hashes (a cost in proportion to the log).
"""

from __future__ import annotations

import base64
import binascii
import time
from dataclasses import dataclass

from agent_saga.proofs import (
    Checkpoint,
    CheckpointError,
    ForkError,
    MerkleTree,
    NoteError,
    NoteVerifier,
    check_extension,
    open_checkpoint,
    record_leaf,
)

from .db import Database, Tx
from .ingest import IngestRefused, keep_evidence, origin_state, read_records


@dataclass(frozen=True)
class AcceptedCheckpoint:
    origin: str
    size: int
    root: str
    note: str
    received_at: float


def accept_checkpoint(
    db: Database, origin: str, note: str, proof: list[str], verifier: str | None, token: str
) -> AcceptedCheckpoint:
    """Accept ``note`` for ``origin`` (see the module docstring).

    Raises:
        IngestRefused: 422 for a malformed note, key or proof, or records not yet received;
            409 for another key, a root that is not the stored records' or a fork.
    """
    try:
        with db.transaction() as tx:
            return _accept(tx, origin, note, proof, verifier)
    except IngestRefused as refused:
        body = {"note": note, "proof": proof, "verifier": verifier}
        keep_evidence(db, origin, None, "checkpoint", str(refused), body, token)
        raise


def _accept(
    tx: Tx, origin: str, note: str, proof_text: list[str], verifier_text: str | None
) -> AcceptedCheckpoint:
    state = origin_state(tx, origin, lock=True)
    key_text = state.verifier or verifier_text
    if key_text is None:
        raise IngestRefused(422, "the first checkpoint of an origin comes with its verifier key")
    if state.verifier is not None and verifier_text not in (None, state.verifier):
        raise IngestRefused(409, "checkpoint signed with another key than this origin's")
    try:
        verifier = NoteVerifier.parse(key_text)
        fresh = open_checkpoint(note, [verifier])
        proof = [base64.b64decode(p.encode("ascii"), validate=True) for p in proof_text]
    except (NoteError, CheckpointError, binascii.Error, UnicodeEncodeError, ValueError) as exc:
        raise IngestRefused(422, f"checkpoint refused: {exc}") from None
    if fresh.size > state.last_seq:
        raise IngestRefused(
            422, f"checkpoint covers {fresh.size} records, {state.last_seq} were received"
        )
    tree = MerkleTree.from_leaf_hashes(
        record_leaf(r) for r in read_records(tx, origin, upto=fresh.size)
    )
    if tree.root(fresh.size) != fresh.root:
        raise IngestRefused(409, "checkpoint root differs from the root of the records received")
    if state.checkpoint_note is not None:
        older = open_checkpoint(state.checkpoint_note, [verifier])
        try:
            check_extension(older, fresh, proof)
        except ForkError as exc:
            raise IngestRefused(409, f"fork: {exc}") from None
        except CheckpointError as exc:
            raise IngestRefused(409, str(exc)) from None
        if older.size == fresh.size:
            return _row(origin, older, time.time())
    now = time.time()
    root = base64.b64encode(fresh.root).decode()
    tx.execute(
        "INSERT INTO checkpoints (origin, size, root, note, received_at) VALUES (?, ?, ?, ?, ?)",
        (origin, fresh.size, root, fresh.note, now),
    )
    tx.execute(
        "UPDATE origins SET checkpoint_size = ?, checkpoint_root = ?, checkpoint_note = ?, "
        "verifier = ?, updated_at = ? WHERE origin = ?",
        (fresh.size, root, fresh.note, key_text, now, origin),
    )
    return _row(origin, fresh, now)


def _row(origin: str, checkpoint: Checkpoint, at: float) -> AcceptedCheckpoint:
    root = base64.b64encode(checkpoint.root).decode()
    return AcceptedCheckpoint(origin, checkpoint.size, root, checkpoint.note, at)


def list_checkpoints(db: Database, origin: str | None, limit: int) -> list[AcceptedCheckpoint]:
    sql = "SELECT origin, size, root, note, received_at FROM checkpoints"
    params: list[object] = []
    if origin is not None:
        sql += " WHERE origin = ?"
        params.append(origin)
    with db.transaction(write=False) as tx:
        rows = tx.all(
            sql + " ORDER BY received_at DESC, origin, size DESC LIMIT ?", [*params, limit]
        )
    return [AcceptedCheckpoint(str(o), int(s), str(r), str(n), float(a)) for o, s, r, n, a in rows]


__all__ = ["AcceptedCheckpoint", "accept_checkpoint", "list_checkpoints"]
