"""Audits of a home's file log, read-only: checkpoint checks, disclosure bundles, certify.

These read the log the way the reading commands do (shared lock, never for writing). Publishing
a checkpoint writes only under ``checkpoints/`` (and creates the key on first use).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._errors import CorruptLogError
from .._log.chain import Chain
from .._log.files import LOG_NAME, OS
from .._log.locks import owner_alive
from .._log.read import iter_log
from .._log.records import GENESIS, Record
from .._log.store import VerifyReport
from ._certify import CRITICAL, WARNING, Finding, certificate, certify_records
from ._checkpoint import Checkpoint, CheckpointError, check_extension
from ._checkpoints import CheckpointLog
from ._disclosure import build_bundle
from ._logtree import tree_of
from ._note import NoteVerifier
from ._signing import home_signer, home_verifier
from ._tree import MerkleTree

__all__ = ["LogSnapshot", "check_checkpoint", "snapshot"]


@dataclass(frozen=True)
class LogSnapshot:
    """The verified records of a log (up to the first break), their tree and the chain report."""

    records: tuple[Record, ...]
    tree: MerkleTree
    chain: VerifyReport


def snapshot(home: Path) -> LogSnapshot:
    """Read and verify ``home``'s log file once (records stop at the first break)."""
    path = home / LOG_NAME
    records: list[Record] = []
    error: CorruptLogError | None = None
    try:
        for _, record in iter_log(path, Chain()):
            records.append(record)
    except CorruptLogError as exc:
        error = exc  # the records before the break still count
    head = records[-1].hash if records else GENESIS
    report = VerifyReport(error is None, len(records), error, head)
    return LogSnapshot(tuple(records), tree_of(records), report)


def check_checkpoint(tree: MerkleTree, checkpoint: Checkpoint) -> str | None:
    """Why the log behind ``tree`` is not an extension of ``checkpoint`` (``None``: it is).

    The check is the one a newer checkpoint must pass: a consistency proof from the older one.
    """
    if tree.size < checkpoint.size:
        return f"log truncated: {tree.size} records, but a checkpoint covers {checkpoint.size}"
    head = Checkpoint(checkpoint.origin, tree.size, tree.root())
    proof = tree.consistency_proof(checkpoint.size) if 0 < checkpoint.size < tree.size else []
    try:
        check_extension(checkpoint, head, proof)
    except CheckpointError as exc:
        return f"log rewritten: the first {checkpoint.size} records changed ({exc})"
    return None


def publish(home: Path, log: LogSnapshot) -> Checkpoint:
    """Sign and publish a checkpoint of ``log`` (refused if it does not extend the latest)."""
    return CheckpointLog(home).publish(log.tree, home_signer(home))


def latest_problem(
    home: Path, log: LogSnapshot, verifiers: Sequence[NoteVerifier]
) -> tuple[Checkpoint | None, Finding | None]:
    """The latest checkpoint and, when there is one, what is wrong with the log against it."""
    try:
        latest = CheckpointLog(home).latest(list(verifiers))
    except CheckpointError as exc:
        return None, Finding(CRITICAL, "checkpoint", f"latest checkpoint rejected: {exc}")
    if latest is None:
        message = "no earlier checkpoint: a truncated log could not be detected"
        return None, Finding(WARNING, "checkpoint", message)
    problem = check_checkpoint(log.tree, latest)
    return latest, None if problem is None else Finding(CRITICAL, "checkpoint", problem)


def home_verifiers(home: Path, given: NoteVerifier | None) -> list[NoteVerifier]:
    """The keys trusted for ``home``'s checkpoints: the one given, else the home's own."""
    if given is not None:
        return [given]
    own = home_verifier(home)
    return [] if own is None else [own]


def prove(home: Path, saga_id: str) -> dict[str, Any]:
    """A disclosure bundle for ``saga_id``, under a checkpoint that covers its end."""
    log = snapshot(home)
    if not log.chain.ok:
        raise CorruptLogError(str(home / LOG_NAME), 0, f"log does not verify: {log.chain.error}")
    signer = home_signer(home)
    _, problem = latest_problem(home, log, [signer.verifier])
    if problem is not None and problem.severity == CRITICAL:
        raise CheckpointError(problem.message)
    checkpoint = publish(home, log)
    return build_bundle(saga_id, log.records, log.tree, checkpoint)


def certify(home: Path) -> tuple[dict[str, Any], list[Finding]]:
    """Check the log of ``home`` and return the signed certificate and its findings."""
    log = snapshot(home)
    signer = home_signer(home)
    latest, problem = latest_problem(home, log, [signer.verifier])
    covered = latest
    if log.chain.ok and (problem is None or problem.severity != CRITICAL):
        covered = publish(home, log)
    findings = certify_records(
        log.records, log.chain, problem, lambda owner: owner_alive(OS, home, owner)
    )
    cert = certificate(log.records, findings, covered, signer, int(time.time()))
    return cert, findings
