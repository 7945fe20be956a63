"""certify's findings over a log read once, in order, keeping only the sagas still open.

:class:`LogJudge` takes the records of a log one at a time and gives the same findings and
counts as judging every saga from all of its records at the end
(:func:`._certify.certify_records` runs it over records in memory), while holding only:

* the records of each *open* saga: one seen and not yet ended (no ``saga.end`` so far);
* a filter of the sagas already ended and judged that grows with them (:mod:`._bloom`: a
  series of Bloom filters, 7,395 bytes up to 1,024 sagas, 9.2 bytes a saga at a million, 11.8
  at a billion);
* the findings so far, the redaction records' findings, the passkey audit's registry, requests
  and nonces (:class:`~._passkey_audit.PasskeyAuditor`), the targets of ``saga.settled``
  records and the ended sagas that need a human (a settlement anywhere in the log changes
  their findings);
* the *reopened* sagas (below): for each, the index and hash of the record that reopened it
  and its records from that one on.

A saga is judged when its ``saga.end`` is read, from the records it has then. What can follow
that end changes the verdict (a record of the saga after its end is CRITICAL; a late
compensation or approval changes its steps), so a later record of a saga whose id the filter
holds marks the saga *reopened*, and its records from there on are kept; at the end the log is
read a second time (the ``reread`` given to :meth:`LogJudge.finish`, verified again and
required to reach the same head), the records of each reopened saga before its reopening are
collected, the verdict given at its end is taken back and it is judged from all of its records.
A false positive of the filter (a new saga whose id it seems to hold: under 1.82e-12 a saga,
under 0.01 expected in a log of fewer than 5.5 billion sagas, see :mod:`._bloom`) costs only
that second read: the saga is judged from all of its records like the others. The engine never
reopens a saga, so on its logs the second read comes only from false positives.

A second read that does not reach the first one's head (the log changed under the pass) makes
the certificate NOT CERTIFIED (a CRITICAL chain finding), and its counts stay exact for every
reopened saga whose reopening record the second read reached unchanged: the chain makes the
records before it the first read's, and those after it were kept. One that the second read did
not reach unchanged (the log changed before it) keeps the verdict given at its end: counted
once when it was ended before, missing from the counts only when the filter was wrong about
it (under 1.82e-12 a saga). Any other error of the second read (the store cannot be read)
propagates: certify then publishes and signs nothing (:func:`._audit.certify`).

A saga's verdict depends only on its own records (those whose ``saga`` is its id), the
``saga.settled`` records naming it, ``now`` when it is suspended and whether its owner lives
when it is running: an ended saga whose end says it needs a human, is suspended or is running is
judged after the pass (``_JUDGED_LAST``), with the log's last time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from .._errors import CorruptLogError
from .._history.build import build_history
from .._history.fields import settlement
from .._history.views import SagaView
from .._log.records import Kind, Record, SagaStatus
from .._log.redaction import REDACTION_KIND
from .._log.store import VerifyReport
from ._bloom import FIRST_CAPACITY, PROBES, Ended
from ._findings import (
    CRITICAL,
    WARNING,
    Finding,
    approved_steps,
    redaction_findings,
    saga_findings,
)
from ._passkey import EXTRA_MISSING, PASSKEY_LIMIT
from ._passkey_audit import PasskeyAuditor

__all__ = ["LogJudge"]

_JUDGED_LAST = frozenset({SagaStatus.NEEDS_HUMAN, SagaStatus.SUSPENDED, SagaStatus.RUNNING})
"""Ended sagas judged only after the pass: a settlement anywhere in the log settles one that
needs a human, and an end that says suspended or running is judged against ``now`` and the
owner as at the end of the log (as a whole-log reading judges it)."""


class LogJudge:
    """Certify's findings over a log fed in order (see the module docstring).

    ``owner_alive`` answers for a saga still running at the end; ``now_ms`` decides whether a
    suspended saga expired (``None``: the newest record's time). ``bloom`` is the filter's
    first capacity and its probes (:class:`._bloom.Ended`; tests make it small to make false
    positives frequent).
    """

    def __init__(
        self,
        owner_alive: Callable[[str], bool],
        now_ms: int | None = None,
        bloom: tuple[int, int] = (FIRST_CAPACITY, PROBES),
    ) -> None:
        self.owner_alive = owner_alive
        self.now_ms = now_ms
        self.records = 0
        self.newest: int | None = None
        self.head = ""
        self.open: dict[str, tuple[int, list[Record]]] = {}
        """Each open saga's records, with the index in the log of its first one."""
        self.ended = Ended(*bloom)
        self.reopened: dict[str, tuple[int, str, list[Record]]] = {}
        """Reopened sagas, each with the index in the log and the hash of the record that
        reopened it, and its records from that one on."""
        self.problem: str | None = None
        self.verdicts: dict[str, tuple[int, list[Finding]]] = {}
        """Findings of each judged saga that has any, with the index of its first record (the
        order of the sagas in the findings, as in the log)."""
        self.waiting: dict[str, tuple[int, SagaView, set[int]]] = {}
        """Ended sagas of :data:`_JUDGED_LAST`: judged after the pass, once every settlement,
        the log's newest time and ``now_ms`` are known."""
        self.settled: dict[str, str] = {}
        self.statuses: dict[SagaStatus, int] = {}
        self.redactions: list[Finding] = []
        self.passkeys = PasskeyAuditor()

    def add(self, record: Record) -> None:
        """Take the next record of the log (verified by the caller)."""
        index = self.records
        self.records += 1
        self.newest = record.ts if self.newest is None else max(self.newest, record.ts)
        self.head = record.hash
        self.passkeys.take(record)
        if record.kind == REDACTION_KIND:
            self.redactions += redaction_findings((record,))
        saga_id = record.saga
        if saga_id is None:
            settles = settlement(record)
            if settles is not None:
                self.settled[settles[0]] = settles[1]
            return
        held = self.open.get(saga_id)
        if held is None:
            reopened = self.reopened.get(saga_id)
            if reopened is not None:
                reopened[2].append(record)
                return
            if saga_id in self.ended:
                self.reopened[saga_id] = (index, record.hash, [record])
                return
            held = self.open[saga_id] = (index, [])
        held[1].append(record)
        if record.kind == Kind.SAGA_END:
            del self.open[saga_id]
            self.ended.add(saga_id)
            self._judge(saga_id, *held)

    def _judge(self, saga_id: str, first: int, records: Sequence[Record]) -> None:
        (view,) = build_history(records).sagas
        approved = approved_steps(records).get(saga_id, set())
        if view.status in _JUDGED_LAST:
            self.waiting[saga_id] = (first, view, approved)
        else:
            self._verdict(first, view, approved)

    def _verdict(self, first: int, view: SagaView, approved: set[int]) -> None:
        if view.id in self.settled and view.status is SagaStatus.NEEDS_HUMAN:
            view = replace(view, settled=self.settled[view.id])
        alive = None
        if view.status is SagaStatus.RUNNING and view.owner is not None:
            alive = self.owner_alive(view.owner)
        now_ms = self.now_ms
        if now_ms is None:
            now_ms = 0 if self.newest is None else self.newest
        found = saga_findings(view, approved, alive, now_ms)
        if found:
            self.verdicts[view.id] = (first, found)
        self.statuses[view.status] = self.statuses.get(view.status, 0) + 1

    def _take_back(self, saga_id: str, records: Sequence[Record]) -> None:
        """Undo the verdict this pass gave ``saga_id`` at its end from ``records``, the ones
        it had before it was reopened (none: a false positive, never judged)."""
        if not records or self.waiting.pop(saga_id, None) is not None:
            return  # never judged, or waiting for the end: nothing counted yet
        (view,) = build_history(records).sagas
        self.statuses[view.status] -= 1
        self.verdicts.pop(saga_id, None)

    def finish(self, reread: Callable[[], Iterable[Record]]) -> None:
        """Judge the reopened sagas (reading the log again with ``reread``, which must give
        the same records), what is still open and the ended sagas that need a human.

        A second read that does not reach the first one's head (the log was changed under
        this pass) sets :attr:`problem`, which :meth:`findings` reports as a CRITICAL break of
        the chain; a reopened saga is still judged from all of its records when the second read
        reached the record that reopened it unchanged (the records before it are then the
        first read's: the chain), and otherwise keeps the verdict given at its end (see the
        module docstring). An error of ``reread`` other than :class:`CorruptLogError` (the
        store cannot be read) propagates.
        """
        if self.reopened:
            self._reread(reread)
        for saga_id, (first, records) in self.open.items():
            (view,) = build_history(records).sagas
            self._verdict(first, view, approved_steps(records).get(saga_id, set()))
        self.open.clear()
        for first, view, approved in self.waiting.values():
            self._verdict(first, view, approved)
        self.waiting.clear()

    def _reread(self, reread: Callable[[], Iterable[Record]]) -> None:
        """Collect each reopened saga's records before its reopening, confirm the record
        that reopened it, and judge it again from all of its records."""
        collected: dict[str, list[tuple[int, Record]]] = {saga_id: [] for saga_id in self.reopened}
        marks = {index: digest for index, digest, _ in self.reopened.values()}
        confirmed: set[int] = set()
        count, head = 0, ""
        stream = iter(reread())
        try:
            while count < self.records:
                record = next(stream, None)
                if record is None:
                    break
                saga_id = record.saga
                if saga_id in collected and count < self.reopened[saga_id][0]:
                    collected[saga_id].append((count, record))
                if marks.get(count) == record.hash:
                    confirmed.add(count)
                count, head = count + 1, record.hash
        except CorruptLogError:
            pass  # short of the first read: reported below
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()
        if (count, head) != (self.records, self.head) or len(confirmed) < len(marks):
            self.problem = (
                f"the log changed while certify read it: a second read of its first "
                f"{self.records} records did not reach the same record {self.records}"
            )
        for saga_id, indexed in collected.items():
            at, _, after = self.reopened[saga_id]
            if at not in confirmed:
                continue  # its records before the reopening are unknown: judged at its end
            before = [record for _, record in indexed]
            self._take_back(saga_id, before)
            records = before + after
            (view,) = build_history(records).sagas
            first = indexed[0][0] if indexed else at
            self._verdict(first, view, approved_steps(records).get(saga_id, set()))
        self.reopened.clear()

    def findings(self, chain: VerifyReport, checkpoint_problem: Finding | None) -> list[Finding]:
        """Every finding, in the order certify lists them (call after :meth:`finish`)."""
        findings: list[Finding] = []
        if not chain.ok:
            findings.append(Finding(CRITICAL, "chain", f"the hash chain is broken: {chain.error}"))
        if self.problem is not None:
            findings.append(Finding(CRITICAL, "chain", self.problem))
        if checkpoint_problem is not None:
            findings.append(checkpoint_problem)
        findings += self.redactions
        audit = self.passkeys.audit
        if audit.unverifiable:
            findings.append(Finding(CRITICAL, "passkey_unverifiable", EXTRA_MISSING))
        for _, message in audit.problems:
            findings.append(Finding(CRITICAL, "passkey", message))
        if audit.verified:
            message = f"{audit.verified} passkey vote(s) verified; {PASSKEY_LIMIT}"
            findings.append(Finding(WARNING, "passkey_registrations", message))
        for _, found in sorted(self.verdicts.values(), key=lambda item: item[0]):
            findings += found
        return findings

    def counts(self, findings: Sequence[Finding]) -> dict[str, int]:
        """The certificate's ``counts`` (after :meth:`finish`)."""
        counts = {"records": self.records, "sagas": sum(self.statuses.values())}
        for status in SagaStatus:
            counts[status.value] = self.statuses.get(status, 0)
        counts["passkey_votes"] = self.passkeys.audit.verified
        counts["critical"] = sum(1 for f in findings if f.severity == CRITICAL)
        counts["warning"] = sum(1 for f in findings if f.severity == WARNING)
        return counts
