"""Selective disclosure: one saga's records, proven included and complete, checked offline.

A bundle holds the saga's records, an inclusion proof for each under a signed checkpoint, and
that checkpoint. Verification needs only the bundle and the log's public key:

1. the checkpoint's signature is checked against the key;
2. each record's chain hash is recomputed from its contents, and its leaf is proven to be leaf
   ``seq - 1`` of the checkpointed tree, so every record shown is one the log really holds;
3. completeness: the last record is the saga's terminal ``saga.end``, which commits to the
   number of the saga's records before it (written by the engine when the saga ended). The
   bundle must show exactly that many other records, all of this saga, all before the terminal
   and all distinct. Since each is a real record of the log, they are then *all* of the saga's
   records: leaving one out, or adding one from another saga, fails.

"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .._errors import AgentSagaError
from .._log.chain import Chain, ChainBreak, Masked, parse_line, stored_line
from .._log.codec import CodecError, decode
from .._log.ledger import RedactionLedger
from .._log.records import Kind, Record
from .._log.redaction import REDACTION_KIND
from ._checkpoint import Checkpoint, CheckpointError, open_checkpoint
from ._logtree import record_leaf
from ._merkle import ProofError, verify_inclusion
from ._note import NoteVerifier

__all__ = ["DisclosureError", "DisclosureReport", "build_bundle", "verify_bundle"]

FORMAT = "agent-saga.disclosure/1"
MAX_BUNDLE_BYTES = 64 * 1024 * 1024
MAX_RECORDS = 100_000
MAX_PROOF = 64


class DisclosureError(AgentSagaError, ValueError):
    """A bundle cannot be built, or does not prove what it claims."""


@dataclass(frozen=True)
class DisclosureReport:
    """What a verified bundle proves."""

    saga: str
    records: tuple[Record, ...]
    checkpoint: Checkpoint


class ProofTree(Protocol):
    """What a bundle needs of the log's tree (a :class:`MerkleTree`, or the proofs collected
    by a streaming pass: :class:`._prover.ProvenTree`)."""

    @property
    def size(self) -> int: ...

    def root(self, size: int | None = None) -> bytes: ...

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]: ...


def build_bundle(
    saga_id: str, records: Iterable[Record], tree: ProofTree, checkpoint: Checkpoint
) -> dict[str, Any]:
    """The disclosure bundle of ``saga_id`` under ``checkpoint`` (a JSON-ready dict).

    ``tree`` must hold the log's leaves up to at least ``checkpoint.size``.

    Raises:
        DisclosureError: the saga is unknown, has not ended, ended after the checkpoint, or
            its terminal record carries no record count (it was written by an older version).
    """
    if tree.size < checkpoint.size or tree.root(checkpoint.size) != checkpoint.root:
        raise DisclosureError("the log does not match the checkpoint (was it rewritten?)")
    own: list[Record] = []
    terminal: Record | None = None
    all_records = list(records)
    for record in all_records:
        if record.saga != saga_id:
            continue
        own.append(record)
        if record.kind == Kind.SAGA_END:
            terminal = record
            break
    if not own:
        raise DisclosureError(f"no saga {saga_id!r} in the log")
    if terminal is None:
        raise DisclosureError(
            f"saga {saga_id} has not ended: its completeness cannot be proven yet "
            "(let it finish, or run `agent-saga recover`)"
        )
    if not isinstance(terminal.data.get("records"), int):
        raise DisclosureError(f"saga {saga_id}'s terminal record does not count its records")
    if terminal.seq > checkpoint.size:
        raise DisclosureError(f"saga {saga_id} ended after the checkpoint; checkpoint again")

    def proven(record: Record) -> dict[str, Any]:
        proof = tree.inclusion_proof(record.seq - 1, checkpoint.size)
        return {
            "record": record.to_json(),
            "proof": [base64.b64encode(h).decode() for h in proof],
        }

    seqs = {r.seq for r in own}
    redactions = [
        proven(r)
        for r in all_records
        if r.kind == REDACTION_KIND and r.seq <= checkpoint.size and _names_any(r, seqs)
    ]
    bundle = {
        "format": FORMAT,
        "saga": saga_id,
        "checkpoint": checkpoint.note,
        "records": [proven(r) for r in own],
    }
    if redactions:
        bundle["redactions"] = redactions
    return bundle


def _names_any(record: Record, seqs: set[int]) -> bool:
    entries = record.data.get("records")
    return isinstance(entries, list) and any(
        isinstance(e, dict) and e.get("seq") in seqs for e in entries
    )


def _fail(message: str) -> DisclosureError:
    return DisclosureError(f"bundle does not verify: {message}")


def _proof(value: object, where: str) -> list[bytes]:
    if not isinstance(value, list) or len(value) > MAX_PROOF:
        raise _fail(f"{where}: the proof must be a list of at most {MAX_PROOF} hashes")
    hashes = []
    for item in value:
        if not isinstance(item, str):
            raise _fail(f"{where}: proof hashes are base64 strings")
        try:
            hashes.append(base64.b64decode(item.encode("ascii"), validate=True))
        except (binascii.Error, UnicodeEncodeError) as exc:
            raise _fail(f"{where}: a proof hash is not base64") from exc
    return hashes


def _load(bundle: bytes | str | dict[str, Any]) -> dict[str, Any]:
    if isinstance(bundle, dict):
        return bundle
    if len(bundle) > MAX_BUNDLE_BYTES:
        raise _fail(f"larger than {MAX_BUNDLE_BYTES} bytes")
    try:
        loaded = decode(bundle)
    except CodecError as exc:
        raise _fail(f"not valid JSON: {exc}") from exc
    if not isinstance(loaded, dict):
        raise _fail("not a JSON object")
    return loaded


def verify_bundle(
    bundle: bytes | str | dict[str, Any],
    verifiers: Sequence[NoteVerifier],
    *,
    chain_key: bytes | None = None,
) -> DisclosureReport:
    """Check a disclosure bundle offline (see the module docstring).

    ``chain_key`` is needed for a log kept with a keyed chain: each record's chain hash is an
    HMAC then, and recomputing it needs the key.

    Raises:
        DisclosureError: anything the bundle claims does not hold; the message says what.
    """
    loaded = _load(bundle)
    if loaded.get("format") != FORMAT:
        raise _fail(f"format is not {FORMAT!r}")
    saga_id, note, entries = loaded.get("saga"), loaded.get("checkpoint"), loaded.get("records")
    if not isinstance(saga_id, str) or not isinstance(note, str) or not isinstance(entries, list):
        raise _fail("it needs a saga id, a checkpoint and a list of records")
    if not entries or len(entries) > MAX_RECORDS:
        raise _fail(f"it must hold between 1 and {MAX_RECORDS} records")
    try:
        checkpoint = open_checkpoint(note, verifiers)
    except CheckpointError as exc:
        raise _fail(str(exc)) from exc
    extra = loaded.get("redactions", [])
    if not isinstance(extra, list) or len(extra) > MAX_RECORDS:
        raise _fail("redactions must be a list of records")
    ledger = RedactionLedger()
    chain = Chain(chain_key)
    justification: list[Record] = []
    for position, entry in enumerate(extra):
        redaction, masked = _proven_record(entry, f"redaction {position + 1}", checkpoint, chain)
        if masked is not None or redaction.kind != REDACTION_KIND:
            raise _fail(f"redaction {position + 1} is not a log.redaction record")
        justification.append(redaction)
        if redaction.v != 1:
            ledger.saw_version_2(redaction.seq)
    records: list[Record] = []
    for position, entry in enumerate(entries):
        where = f"record {position + 1}"
        checked, masked = _proven_record(entry, where, checkpoint, chain)
        if checked.v != 1:
            ledger.saw_version_2(checked.seq)
        if masked is not None and masked.leaves:
            ledger.hold_leaves(checked.seq, position, masked.leaves)
        elif masked is not None:
            ledger.hold(checked.seq, position, stored_line(entry["record"]))
        seq = checked.seq
        if checked.saga != saga_id:
            raise _fail(f"{where} (seq {seq}) belongs to saga {checked.saga!r}, not {saga_id!r}")
        if records and seq <= records[-1].seq:
            raise _fail(f"{where}: records must be in increasing seq order without repeats")
        records.append(checked)
    for redaction in sorted(justification, key=lambda r: r.seq):
        problem = ledger.justify(redaction.seq, redaction.prev, redaction.data)
        if problem is not None:
            raise _fail(problem)
    unjustified = ledger.first_unjustified()
    if unjustified is not None:
        raise _fail(f"record seq {unjustified[0]}: {unjustified[2]}")
    _check_complete(records)
    return DisclosureReport(saga_id, tuple(records), checkpoint)


def _proven_record(
    entry: object, where: str, checkpoint: Checkpoint, chain: Chain
) -> tuple[Record, Masked | None]:
    """A bundle entry's record, checked and proven included; with what was masked in it after
    it was written (then valid only with a signed redaction record accounting for it)."""
    if not isinstance(entry, dict) or not isinstance(entry.get("record"), dict):
        raise _fail(f"{where}: expected {{'record': ..., 'proof': [...]}}")
    obj = entry["record"]
    seq, prev = obj.get("seq"), obj.get("prev")
    if type(seq) is not int or seq < 1 or not isinstance(prev, str):
        raise _fail(f"{where}: seq must be a positive integer and prev a hash")
    try:
        line = stored_line(obj)
    except (CodecError, TypeError, ValueError) as exc:
        raise _fail(f"{where} (seq {seq}): not a record: {exc}") from exc
    checked = parse_line(chain, line, seq, prev, allow_masked=True)
    if isinstance(checked, ChainBreak):
        raise _fail(f"{where} (seq {seq}): {checked.reason}")
    masked: Masked | None = None
    if isinstance(checked, Masked):
        masked = checked
        assert masked.record is not None
        checked = masked.record
    try:
        verify_inclusion(
            record_leaf(checked),
            seq - 1,
            checkpoint.size,
            _proof(entry.get("proof"), where),
            checkpoint.root,
        )
    except ProofError as exc:
        raise _fail(f"{where} (seq {seq}) is not in the checkpointed log: {exc}") from exc
    return checked, masked


def _check_complete(records: list[Record]) -> None:
    terminal = records[-1]
    if terminal.kind != Kind.SAGA_END:
        raise _fail("the last record is not the saga's terminal record; completeness unproven")
    if any(r.kind == Kind.SAGA_END for r in records[:-1]):
        raise _fail("more than one terminal record")
    count = terminal.data.get("records")
    if type(count) is not int:
        raise _fail("the terminal record does not count the saga's records")
    if count != len(records) - 1:
        raise _fail(
            f"incomplete: the saga wrote {count} records before its end, "
            f"the bundle shows {len(records) - 1}"
        )
