"""Audits of a home's log, read-only: checkpoint checks, disclosure bundles, certify.

The log is read from a :class:`~agent_saga._log.source.LogSource`: the file store of the home
(by default) or the fleet log on PostgreSQL, each verified while read (the file's synced
watermark included). Checkpoints live in the home in both cases (``checkpoints/latest.note``,
signed with ``keys/checkpoint.key``), where the kits writing that log publish them. Publishing
a checkpoint writes only under ``checkpoints/`` (and creates the key on first use).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._errors import CorruptLogError
from .._log.chain import Chain
from .._log.records import GENESIS, Record
from .._log.redaction import REDACTION_KIND
from .._log.source import ChainKeyError, FileLogSource, LogSource
from .._log.store import VerifyReport
from .._log.unfinishedset import fold
from ._certify import CRITICAL, WARNING, Finding, signed
from ._checkpoint import Checkpoint, CheckpointError, open_checkpoint
from ._checkpoints import CheckpointLog
from ._disclosure import build_bundle
from ._frontier import MerkleFrontier
from ._judge import LogJudge
from ._logtree import record_leaf
from ._note import NoteVerifier
from ._notefiles import note_size
from ._prover import SagaProver
from ._resume import ResumePoint
from ._signing import home_signer, home_verifier
from ._stream import LineHook, Observer, StartSet, StreamedLog, stream_log
from ._tree import MerkleTree
from ._unfinished import signed_set, statement_lines

__all__ = ["LogSnapshot", "check_checkpoint", "snapshot"]


@dataclass(frozen=True)
class LogSnapshot:
    """The verified records of a log (up to the first break), their tree and the chain report.

    ``records`` is empty and ``tree`` is ``None`` when the snapshot was taken without keeping
    them: ``stream`` then holds the Merkle frontier and the roots at the sizes captured (the
    checkpoints read before the log). ``redactions`` always holds the ``log.redaction`` records.
    """

    records: tuple[Record, ...]
    tree: MerkleTree | None
    chain: VerifyReport
    redactions: tuple[Record, ...] = ()
    where: str = ""
    checkpoint: _NoteRead | None = None
    """The home's latest checkpoint as read *before* the log (see :func:`snapshot`)."""
    stream: StreamedLog | None = None
    unfinished: tuple[str, ...] | None = None
    """The sagas unfinished after the records that verified, counted from them when the
    snapshot was asked to (``None``: not asked, or they could not be counted); what
    :func:`publish` signs as the statement of unfinished sagas."""

    @property
    def size(self) -> int:
        """Records in the tree (those that verified, up to the first break)."""
        return self.tree.size if self.tree is not None else self.frontier.size

    @property
    def frontier(self) -> MerkleFrontier:
        assert self.stream is not None
        return self.stream.frontier

    def root_at(self, size: int) -> bytes | None:
        """The root of the first ``size`` records; ``None`` when the pass did not capture it."""
        if self.tree is not None:
            return self.tree.root(size)
        if size == self.frontier.size:
            return self.frontier.root()
        return self.frontier_roots.get(size)

    @property
    def frontier_roots(self) -> dict[int, bytes]:
        return {} if self.stream is None else self.stream.roots


@dataclass(frozen=True)
class _NoteRead:
    note: str | None
    error: CheckpointError | None = None


def snapshot(
    source: LogSource | Path,
    *,
    keep_records: bool = True,
    home: Path | None = None,
    capture: Collection[int] = (),
    resume: ResumePoint | None = None,
    frontier: MerkleFrontier | None = None,
    observer: Observer | None = None,
    unfinished: bool = False,
    each: Callable[[Record], None] | None = None,
    on_line: LineHook | None = None,
) -> LogSnapshot:
    """Read and verify a log once: records stop at the first break, which the report holds.

    ``source`` is a log source or a home (its file log). Without ``keep_records`` nothing but
    a Merkle frontier (O(log n) hashes) and the redaction records stays in memory: the roots at
    the latest checkpoint's size and at the sizes in ``capture`` are computed as the records
    stream by, and a file log is read only after ``resume`` when it is given (see
    :mod:`._stream`; ``frontier`` and ``observer`` are handed to it). With ``home``, the
    home's latest checkpoint is read first: records are appended before a checkpoint covers
    them, so a checkpoint read before the log never covers more than the log holds, even while
    agents append and publish (read after the log, it could, and a live log would look
    truncated). With ``unfinished`` (a snapshot to publish) the sagas unfinished at its end
    are counted from the records read; a resumed file log starts from the set the resume
    point's checkpoint signs, checked (:func:`._unfinished.signed_set`), and is read from its
    first record when that checkpoint signs none. With ``each`` (and without ``keep_records``)
    every verified record is handed to it in order as the pass reads it, from the first; with
    ``on_line`` every stored line of a file log (see :data:`._stream.LineHook`).

    Raises:
        ChainKeyError: record 1 does not verify with the chain key given (or without one): a
            key problem, reported as such rather than as a break.
        StoreFailedError: the store cannot be read.
    """
    if isinstance(source, Path):
        source = FileLogSource(source)
    checkpoint = None
    sizes = set(capture)
    if home is not None:
        try:
            checkpoint = _NoteRead(CheckpointLog(home).read_note())
        except CheckpointError as exc:
            checkpoint = _NoteRead(None, exc)
        if checkpoint.note is not None:
            sizes.add(note_size(checkpoint.note))
    if not keep_records:
        start: StartSet | None = None
        if unfinished:
            start = _no_set
            if isinstance(source, FileLogSource):
                start = signed_set(source.home, source.key)
        streamed = stream_log(
            source, sizes, resume, frontier=frontier, observer=observer, unfinished=start,
            each=each, on_line=on_line,
        )  # fmt: skip
        counted = None if streamed.unfinished is None else tuple(streamed.unfinished)
        return LogSnapshot(
            (), None, streamed.chain, tuple(streamed.redactions), source.where, checkpoint,
            streamed, counted,
        )  # fmt: skip
    records: list[Record] = []
    redactions: list[Record] = []
    tree = MerkleTree()
    head, error = GENESIS, None
    try:
        for record in source.records():
            tree.append(record_leaf(record))
            head = record.hash
            records.append(record)
            if record.kind == REDACTION_KIND:
                redactions.append(record)
    except ChainKeyError:
        raise
    except CorruptLogError as exc:
        error = exc  # the records before the break still count
    report = VerifyReport(error is None, tree.size, error, head)
    counted = None
    if unfinished:
        sets: dict[str, None] = {}
        for record in records:
            fold(sets, record)
        counted = tuple(sets)
    return LogSnapshot(
        tuple(records), tree, report, tuple(redactions), source.where, checkpoint, None, counted
    )


def _no_set(point: ResumePoint) -> list[str] | None:
    """A log that is never resumed (not a file log) needs no set at a resume point."""
    return None


def check_checkpoint(log: LogSnapshot, checkpoint: Checkpoint) -> str | None:
    """Why the log is not an extension of ``checkpoint`` (``None``: it is).

    The log's root at the checkpoint's size, recomputed from its records, must be the
    checkpoint's root.
    """
    if log.size < checkpoint.size:
        return f"log truncated: {log.size} records, but a checkpoint covers {checkpoint.size}"
    if checkpoint.size == 0:
        return None
    root = log.root_at(checkpoint.size)
    if root is None:
        return f"the root at {checkpoint.size} records was not computed (internal error)"
    if root != checkpoint.root:
        return (
            f"log rewritten: the first {checkpoint.size} records changed (their root is "
            f"{root.hex()[:16]}..., the checkpoint's {checkpoint.root.hex()[:16]}...)"
        )
    return None


def publish(home: Path, log: LogSnapshot) -> Checkpoint:
    """Sign and publish a checkpoint of ``log`` (refused if it does not extend the latest),
    with the statement of the sagas unfinished at its size when the snapshot counted them
    (``snapshot(..., unfinished=True)``)."""
    lines = statement_lines(None if log.unfinished is None else list(log.unfinished))
    if log.tree is not None:
        return CheckpointLog(home).publish(log.tree, home_signer(home), lines)
    frontier = log.frontier
    return CheckpointLog(home).publish_head(
        frontier.size, frontier.root(), log.frontier_roots, home_signer(home), lines
    )


def latest_problem(
    home: Path, log: LogSnapshot, verifiers: Sequence[NoteVerifier]
) -> tuple[Checkpoint | None, Finding | None]:
    """The latest checkpoint and, when there is one, what is wrong with the log against it.

    The checkpoint is the one read before the log when the snapshot took it (``home=``), else
    the home's latest now.
    """
    try:
        read = log.checkpoint
        if read is None:
            latest = CheckpointLog(home).latest(list(verifiers))
        elif read.error is not None:
            raise read.error
        else:
            latest = None if read.note is None else open_checkpoint(read.note, list(verifiers))
    except CheckpointError as exc:
        return None, Finding(CRITICAL, "checkpoint", f"latest checkpoint rejected: {exc}")
    if latest is None:
        message = "no earlier checkpoint: a truncated log could not be detected"
        return None, Finding(WARNING, "checkpoint", message)
    problem = check_checkpoint(log, latest)
    return latest, None if problem is None else Finding(CRITICAL, "checkpoint", problem)


def home_verifiers(home: Path, given: NoteVerifier | None) -> list[NoteVerifier]:
    """The keys trusted for ``home``'s checkpoints: the one given, else the home's own."""
    if given is not None:
        return [given]
    own = home_verifier(home)
    return [] if own is None else [own]


def prove(home: Path, saga_id: str, source: LogSource | None = None) -> dict[str, Any]:
    """A disclosure bundle for ``saga_id``, under a checkpoint that covers its end.

    ``source`` is the log (default: ``home``'s file log); the checkpoint is ``home``'s.
    """
    source = source or FileLogSource(home)
    prover = None
    if isinstance(source, FileLogSource):  # streamed: O(log n) hashes a record proven
        prover = SagaProver(saga_id, Chain(source.key))
        log = snapshot(
            source, keep_records=False, home=home, frontier=prover.frontier,
            observer=prover.observe, unfinished=True,
        )  # fmt: skip
    else:
        log = snapshot(source, home=home, unfinished=True)
    if not log.chain.ok:
        raise CorruptLogError(log.where, 0, f"log does not verify: {log.chain.error}")
    signer = home_signer(home)
    _, problem = latest_problem(home, log, [signer.verifier])
    if problem is not None and problem.severity == CRITICAL:
        raise CheckpointError(problem.message)
    checkpoint = publish(home, log)
    if prover is not None:
        return build_bundle(saga_id, prover.records, prover.tree(), checkpoint)
    assert log.tree is not None
    return build_bundle(saga_id, log.records, log.tree, checkpoint)


def certify(home: Path, source: LogSource | None = None) -> tuple[dict[str, Any], list[Finding]]:
    """Check a log and return the signed certificate and its findings.

    ``source`` is the log (default: ``home``'s file log); checkpoints and the signing key are
    ``home``'s. A checkpoint is published first only when the log is sound: one signed over a
    broken, cut or rewritten log would vouch for it. The log is read in one streaming pass
    that keeps a Merkle frontier and the records of the sagas not yet ended
    (:class:`._judge.LogJudge`), and read again only when a saga has records after its end.
    That second read comes before anything is published: when it cannot be done (the store
    cannot be read), certify raises the store's error as a failed first read does, and no
    checkpoint is published and no certificate signed; when it finds the log changed, nothing
    is published and the certificate says so (a CRITICAL chain finding).
    """
    source = source or FileLogSource(home)
    judge = LogJudge(source.owner_alive)
    log = snapshot(source, keep_records=False, home=home, unfinished=True, each=judge.add)
    signer = home_signer(home)
    latest, problem = latest_problem(home, log, [signer.verifier])
    now = time.time()
    judge.now_ms = int(now * 1000)
    judge.finish(source.records)
    covered = latest
    sound = log.chain.ok and judge.problem is None  # the second read saw the same log
    if sound and (problem is None or problem.severity != CRITICAL):
        covered = publish(home, log)
    findings = judge.findings(log.chain, problem)
    cert = signed({"counts": judge.counts(findings)}, findings, covered, signer, int(now))
    return cert, findings
