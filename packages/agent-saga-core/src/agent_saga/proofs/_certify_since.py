"""``certify --since``: a certificate of the records after a point of the log, in bounded memory.

The range certified is the records after record ``after`` (the size of the checkpoint named,
or a record count) up to the log's end. The log is read in one streaming pass
(:func:`._audit.snapshot` without records: a Merkle frontier, no record kept) from the newest
resume point of at most ``after`` records (a checkpoint a verify confirmed earlier, see
:mod:`._resume`), or from the first record when there is none; every record read is verified,
so tampering anywhere after the resume point (the range included) breaks the chain and is
CRITICAL, and the log must extend both the named checkpoint and the home's latest one.

What is certified, besides the chain and the checkpoints:

* every saga with a record in the range, and every saga unfinished now (so one left hanging
  before the range is still reported). Their records, earlier ones included, are read one
  saga at a time through the saga index (each verified as read, see
  :mod:`agent_saga._log.sagaindex`), each with every record of the range the pass saw it with
  (else the index is rebuilt), and checked as a full certify checks a saga;
* the redaction records of the range (as WARNINGs, as a full certify lists them).

What it does not check (a full ``certify`` does): records before the resume point; sagas that
ended before the range and have no record in it; passkey votes, whose check needs every
registration and nonce since the first record (a vote in the range is a WARNING saying so).
The list of sagas unfinished before the range comes from the saga index, checked against the
statement of unfinished sagas signed in the home's latest checkpoint and the records after it
(without such a statement, against the whole log, read with the index's fast walk). A saga's
records before the resume point are verified by no pass of this run: with a chain key each
proves itself; without one only the index vouches for them (a WARNING counts them).

Memory holds the frontier, the ids of the sagas the range touches and one saga's records at a
time, whatever the log's age.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._errors import CorruptLogError
from .._history.build import build_history
from .._log.chain import Chain
from .._log.codec import CodecError, decode
from .._log.indexsets import checked_unfinished
from .._log.indexwalk import line_fields
from .._log.records import Record, SagaStatus
from .._log.sagaindex import IndexMismatch, SagaIndex
from .._log.sagarows import belongs_to
from .._log.source import FileLogSource
from ._audit import LogSnapshot, check_checkpoint, latest_problem, publish, snapshot
from ._certify import signed
from ._checkpoint import Checkpoint
from ._checkpoints import CHECKPOINTS_DIR, LATEST_NAME
from ._findings import (
    CRITICAL,
    WARNING,
    Finding,
    approved_steps,
    redaction_findings,
    saga_findings,
)
from ._resume import load_point
from ._signing import home_signer
from ._unfinished import LatestStatement

_VOTE = "approval.vote"


@dataclass(frozen=True)
class Range:
    """What a ``certify --since`` covered: records ``after + 1`` to ``to``, after
    ``checkpoint`` (``None``: a record count was named), read from record ``read_from + 1``."""

    after: int
    to: int
    checkpoint: Checkpoint | None
    read_from: int

    def describe(self) -> str:
        """One line saying what range was certified and from which checkpoint."""
        count = max(0, self.to - self.after)
        base = (
            f"the checkpoint of {self.after} records ({self.checkpoint.origin})"
            if self.checkpoint is not None
            else f"record {self.after}"
        )
        read = (
            f"read from record {self.read_from + 1} (the resume point of {self.read_from} "
            "records, confirmed earlier by its signed checkpoint)"
            if self.read_from
            else "read from record 1 (no resume point at or before it)"
        )
        span = f"records {self.after + 1} to {self.to} ({count})" if count else "no records"
        return f"range: {span} after {base}; {read}"


@dataclass
class _RangeWatch:
    """Sees each record the pass verifies (see :data:`._stream.Observer`) and keeps, of those
    after ``after``, their count, the sagas they touch and the passkey votes among them."""

    after: int
    records: int = 0
    sagas: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Touched saga ids in order of first appearance, each with how many records of the range
    it is read with and the last one's ``seq`` (what a read through the index must match)."""
    passkey_votes: int = 0
    problems: list[str] = field(default_factory=list)

    def __call__(self, index: int, line: bytes, digest: bytes, prev: str) -> None:
        seq = index + 1
        if seq <= self.after:
            return
        self.records += 1
        record = line_fields(line, seq, prev.encode())
        if isinstance(record, str):  # verified by the pass already: only a bug gets here
            self.problems.append(f"record {seq}: {record}")
            return
        target, _ = belongs_to(record)
        if target is not None:
            count, _ = self.sagas.get(target, (0, 0))
            self.sagas[target] = (count + 1, seq)
        if record.kind == _VOTE and b'"passkey"' in line:
            try:
                data = decode(line).get("data")
            except (CodecError, AttributeError):
                data = None
            self.passkey_votes += isinstance(data, dict) and "passkey" in data


def certify_since(
    home: Path, source: FileLogSource, after: int, checkpoint: Checkpoint | None
) -> tuple[dict[str, Any], list[Finding], Range, LogSnapshot]:
    """Certify the records of ``source`` after record ``after`` (see the module docstring).

    ``checkpoint`` is the one ``after`` comes from, when a checkpoint was named (the log must
    extend it). Returns the signed certificate (with its ``range``), the findings, the range
    and the pass (whose states a caller may store as resume points).

    Raises:
        ChainKeyError: record 1 does not verify with the chain key given.
        StoreFailedError: the log cannot be read.
    """
    signer = home_signer(home)
    verifiers = [signer.verifier]
    point, refused = load_point(home, after, verifiers) if after > 0 else (None, [])
    watch = _RangeWatch(after)
    capture = () if checkpoint is None else (checkpoint.size,)
    log = snapshot(
        source, keep_records=False, home=home, capture=capture, resume=point, observer=watch,
        unfinished=True,
    )  # fmt: skip
    assert log.stream is not None
    read_from = log.stream.resumed_from
    findings: list[Finding] = [Finding(WARNING, "resume", note) for note in refused]
    findings += [Finding(WARNING, "resume", note) for note in log.stream.notes]
    if not log.chain.ok:
        findings.append(Finding(CRITICAL, "chain", f"the hash chain is broken: {log.chain.error}"))
    findings += [Finding(CRITICAL, "chain", problem) for problem in watch.problems]
    if checkpoint is not None:
        problem = check_checkpoint(log, checkpoint)
        if problem is not None:
            findings.append(Finding(CRITICAL, "since", f"against the checkpoint named: {problem}"))
    elif after > log.size:
        message = f"--since {after}: the log has {log.size} records (a range beyond its end)"
        findings.append(Finding(CRITICAL, "since", message))
    latest, latest_finding = latest_problem(home, log, verifiers)
    if latest_finding is not None:
        findings.append(latest_finding)
    redactions = log.stream.redactions
    findings += redaction_findings(r for r in redactions if r.seq > after)
    if watch.passkey_votes:
        findings.append(
            Finding(
                WARNING,
                "passkey_unchecked",
                f"{watch.passkey_votes} passkey vote(s) in the range are not verified by "
                "certify --since (it needs every registration since record 1): run a full "
                "certify",
            )
        )
    now = time.time()
    statuses = _certify_sagas(home, source, watch, findings, int(now * 1000), (read_from, log.size))
    covered = latest
    if log.chain.ok and not any(f.severity == CRITICAL for f in findings):
        covered = publish(home, log)
    span = Range(after, log.size, checkpoint, read_from)
    counts: dict[str, int] = {"records": watch.records, "sagas": sum(statuses.values())}
    counts.update({status.value: statuses.get(status, 0) for status in SagaStatus})
    counts["passkey_votes"] = 0
    counts["critical"] = sum(1 for f in findings if f.severity == CRITICAL)
    counts["warning"] = sum(1 for f in findings if f.severity == WARNING)
    body: dict[str, Any] = {
        "range": {
            "after": after,
            "to": log.size,
            "since": None if checkpoint is None else checkpoint.note,
            "read_from": read_from,
        },
        "counts": counts,
    }
    return signed(body, findings, covered, signer, int(now)), findings, span, log


def _certify_sagas(
    home: Path,
    source: FileLogSource,
    watch: _RangeWatch,
    findings: list[Finding],
    now_ms: int,
    passed: tuple[int, int],
) -> dict[SagaStatus, int]:
    """Check each saga the range touches and each unfinished one, reading one saga at a time
    through the index; returns how many sagas of each status were checked.

    A saga read through the index must hold every record of the range the pass saw it with
    (an index that hides a saga of the range, or its last records, is rebuilt from the log).
    ``passed`` is the pass's first record less one and its last: records before it were
    verified by no pass of this run, and on an unkeyed log only the index vouches for them,
    which a WARNING says.
    """
    read_from, to = passed
    index = SagaIndex(home, Chain(source.key))
    statuses: dict[SagaStatus, int] = {}
    unvouched = 0
    try:
        index.refresh()
        ids: dict[str, tuple[int, int]] = dict.fromkeys(_unfinished(index), (0, 0))
        ids = {**watch.sagas, **{k: v for k, v in ids.items() if k not in watch.sagas}}
        for saga_id, seen in ids.items():
            try:
                records = _saga_records(index, saga_id, (watch.after, to), seen)
            except IndexMismatch:
                index.rebuild()
                records = _saga_records(index, saga_id, (watch.after, to), seen)
            unvouched += sum(1 for r in records if r.seq <= read_from)
            approved = approved_steps(records).get(saga_id, set())
            for view in build_history(records).sagas:
                if view.id != saga_id:
                    continue
                alive = None
                if view.status is SagaStatus.RUNNING and view.owner is not None:
                    alive = source.owner_alive(view.owner)
                findings.extend(saga_findings(view, approved, alive, now_ms))
                statuses[view.status] = statuses.get(view.status, 0) + 1
    except (IndexMismatch, CorruptLogError, OSError, sqlite3.Error) as exc:
        message = f"the sagas could not be read through the saga index ({exc}): run a full certify"
        findings.append(Finding(CRITICAL, "sagas", message))
    finally:
        index.close()
    if unvouched and source.key is None:
        message = (
            f"{unvouched} record(s) of the sagas checked lie before record {read_from + 1}, "
            "where this pass began: read through the saga index, and the log has no chain key, "
            "so nothing here shows they are the records the signed checkpoint covers; a full "
            "certify checks them"
        )
        findings.append(Finding(WARNING, "before_range", message))
    return statuses


def _unfinished(index: SagaIndex) -> list[str]:
    """The index's unfinished sagas, checked against the statement of the home's latest
    checkpoint and the log after it (:func:`agent_saga._log.indexsets.checked_unfinished`; the
    whole log when that checkpoint signs no statement); an index that does not pass is rebuilt
    from the log once."""
    index.statement = LatestStatement(index.home, index.home / CHECKPOINTS_DIR / LATEST_NAME)
    try:
        return checked_unfinished(index)
    except IndexMismatch:
        index.rebuild()
        return checked_unfinished(index)


def _saga_records(
    index: SagaIndex, saga_id: str, span: tuple[int, int], seen: tuple[int, int]
) -> list[Record]:
    """The records of ``saga_id`` read through ``index``, which must include the ``seen``
    records of the range ``span`` (after record ``span[0]`` up to ``span[1]``, the pass's
    end; a writer may have added more since): their count and the last one's ``seq``.

    Raises:
        IndexMismatch: the index does not give them all.
    """
    records = index.saga_records(saga_id)
    in_range = [r.seq for r in records if span[0] < r.seq <= span[1]]
    if (len(in_range), in_range[-1] if in_range else 0) != seen:
        raise IndexMismatch(f"the index does not hold the records of saga {saga_id} in the range")
    return records
