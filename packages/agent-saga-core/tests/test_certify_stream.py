"""A full certify streams: the same findings and counts as judging every saga from the whole
log in memory, with memory that does not grow with the log's length."""

from __future__ import annotations

import tracemalloc
from collections.abc import Generator, Iterator, Sequence
from pathlib import Path

import pytest
from agent_saga import REVERSIBLE, AgentKit, FileLogStore, build_history
from agent_saga._log.codec import JSONValue
from agent_saga._log.records import Entry, Record, SagaStatus
from agent_saga._log.source import FileLogSource
from agent_saga._log.store import VerifyReport
from agent_saga.proofs._audit import certify
from agent_saga.proofs._bloom import FIRST_CAPACITY, PROBES
from agent_saga.proofs._findings import Finding, approved_steps, saga_findings
from agent_saga.proofs._judge import LogJudge
from agent_saga.proofs._stream import stream_log
from hypothesis import given, settings
from hypothesis import strategies as st


def whole_log(
    records: Sequence[Record], now_ms: int, alive: bool
) -> tuple[list[Finding], dict[str, int]]:
    """The saga findings and status counts as certify computed them before it streamed: every
    record in memory, one history of the whole log."""
    history = build_history(records)
    approved = approved_steps(records)
    findings: list[Finding] = []
    for saga in history.sagas:
        owner = alive if saga.status is SagaStatus.RUNNING and saga.owner is not None else None
        findings += saga_findings(saga, approved.get(saga.id, set()), owner, now_ms)
    counts = {s.value: sum(1 for v in history.sagas if v.status is s) for s in SagaStatus}
    return findings, counts


def streamed(
    records: Sequence[Record],
    now_ms: int,
    alive: bool,
    bloom: tuple[int, int] = (FIRST_CAPACITY, PROBES),
    late_now: bool = False,
) -> tuple[list[Finding], dict[str, int], int]:
    """The judge fed ``records``; with ``late_now``, told the time only after the pass (as
    ``certify`` does, once it knows the log's newest record)."""
    judge = LogJudge(lambda _: alive, None if late_now else now_ms, bloom)
    for record in records:
        judge.add(record)
    judge.now_ms = now_ms
    rereads = [0]

    def reread() -> Iterator[Record]:
        rereads[0] += 1
        return iter(records)

    judge.finish(reread)
    chain = VerifyReport(True, len(records))
    findings = [f for f in judge.findings(chain, None) if f.saga is not None]
    counts = judge.counts(findings)
    return findings, {s.value: counts[s.value] for s in SagaStatus}, rereads[0]


_KINDS: list[tuple[str, dict[str, JSONValue]]] = [
    ("saga.begin", {"name": "n", "owner": "o1", "pid": 1, "host": "h"}),
    ("step.intent", {"ordinal": 1, "tool": "t", "semantics": "compensable", "compensation": {}}),
    ("step.intent", {"ordinal": 2, "tool": "w", "semantics": "irreversible"}),
    ("step.done", {"ordinal": 1, "tool": "t", "result": 1}),
    ("step.done", {"ordinal": 2, "tool": "w", "result": 2}),
    ("approval.decided", {"ordinal": 2, "decision": "approved"}),
    ("compensation.intent", {"ordinal": 1, "tool": "t"}),
    ("compensation.done", {"ordinal": 1, "tool": "t"}),
    ("compensation.failed", {"ordinal": 1, "tool": "t", "error": {"type": "E"}}),
    ("saga.suspended", {"expires_at": 50}),
    ("saga.resumed", {"owner": "o2"}),
    ("saga.end", {"status": "committed"}),
    ("saga.end", {"status": "rolled_back"}),
    ("saga.end", {"status": "needs_human"}),
    ("saga.end", {"status": "bogus"}),
    ("saga.end", {"status": "suspended"}),
    ("saga.end", {"status": "running"}),
]
_SAGAS = ["s1", "s2", "s3", "s4"]
_BLOOMS = [(1, 1), (4, 2), (FIRST_CAPACITY, PROBES)]
"""Filters' first capacity and probes: the small ones make false positives frequent."""


@st.composite
def logs(draw: st.DrawFn) -> list[Record]:
    """Hostile record sequences: sagas interleaved, ended more than once, records after the
    end or before any begin, settlements before and after the saga they name."""
    steps = draw(
        st.lists(
            st.tuples(st.integers(0, len(_KINDS)), st.sampled_from(_SAGAS), st.integers(0, 99)),
            max_size=40,
        )
    )
    records = []
    for seq, (kind_index, saga, ts) in enumerate(steps, 1):
        if kind_index == len(_KINDS):
            data: dict[str, JSONValue] = {"saga": saga, "by": "ann", "note": "refunded"}
            records.append(Record(seq, ts, "saga.settled", None, data, f"h{seq - 1}", f"h{seq}"))
            continue
        kind, fields = _KINDS[kind_index]
        records.append(Record(seq, ts, kind, saga, dict(fields), f"h{seq - 1}", f"h{seq}"))
    return records


@settings(max_examples=300, deadline=None)
@given(logs(), st.integers(0, 100), st.booleans(), st.sampled_from(_BLOOMS), st.booleans())
def test_streamed_findings_equal_a_whole_log_reading(
    records: list[Record], now_ms: int, alive: bool, bloom: tuple[int, int], late_now: bool
) -> None:
    # a first filter of one id and one probe reopens many sagas (false positives): the second
    # read's path
    findings, counts, _ = streamed(records, now_ms, alive, bloom, late_now)
    assert (findings, counts) == whole_log(records, now_ms, alive)


def _saga(index: int, late: bool = False) -> list[Record]:
    sid, seq = f"saga-{index:08d}", index * 4
    data: dict[str, JSONValue] = {"ordinal": 1, "tool": "add", "semantics": "reversible"}
    kinds: list[tuple[str, dict[str, JSONValue]]] = [("saga.begin", {"name": "b"})]
    kinds += [("step.intent", data)]
    kinds += [("step.done", {"ordinal": 1, "result": 2}), ("saga.end", {"status": "committed"})]
    records = [
        Record(seq + i, seq, kind, sid, dict(fields), f"h{seq + i - 1}", f"h{seq + i}")
        for i, (kind, fields) in enumerate(kinds, 1)
    ]
    if late:  # a late record of a saga ended long ago
        records.append(records[2]._replace(seq=seq + 5, hash=f"h{seq + 5}"))
    return records


def test_a_record_after_an_end_long_past_is_found_by_a_second_read() -> None:
    records = [r for i in range(200) for r in _saga(i)] + _saga(0, late=True)[-1:]
    findings, counts, rereads = streamed(records, 0, False)
    assert rereads == 1
    assert [(f.check, f.saga) for f in findings] == [("after_end", "saga-00000000")]
    assert counts["committed"] == 200
    assert (findings, counts) == whole_log(records, 0, False)


def _peak(sagas: int) -> int:
    """The judge's peak over ``sagas`` ended sagas, but for its filter of them."""
    judge = LogJudge(lambda _: True, 0)
    first = judge.ended.size  # allocated before the trace starts
    tracemalloc.start()
    try:
        for index in range(sagas):
            for record in _saga(index):
                judge.add(record)
        judge.finish(lambda: ())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert judge.counts([])["committed"] == sagas
    return peak - (judge.ended.size - first)


def test_the_judges_memory_does_not_grow_with_the_log() -> None:
    _peak(1_000)  # the first run also allocates what lives on (caches, free lists)
    small, large = _peak(1_000), _peak(4_000)  # 4,000 and 16,000 records
    # keeping the records would hold about 7.6 MB at the larger size; each run peaks near 6-9 KB
    # besides the filter (7,395 bytes for 1,000 sagas, 55,135 for 4,000: see test_certify_filter),
    # a few KB more when the worker's earlier tests left garbage to collect: a fixed margin
    assert large < small + 64_000, (small, large)


def _add(x: int) -> int:
    return x + 1


def test_a_full_certify_of_a_home_equals_a_whole_log_reading(home: Path) -> None:
    with AgentKit(home=home) as kit:
        add = kit.tool(semantics=REVERSIBLE)(_add)
        ended = []
        for _ in range(3):
            with kit.transaction("done") as saga:
                add(1)
            ended.append(saga.id)
        late = Entry("step.done", ended[0], {"ordinal": 2, "tool": "late", "result": None}, 0)
        begin = Entry("saga.begin", "open-saga", {"name": "left open", "owner": "gone-1"}, 0)
        kit.store.append([late, begin], sync=True)
        records = list(kit.store.records())
    alive = FileLogSource(home).owner_alive("gone-1")
    cert, findings = certify(home)
    sagas = [f for f in findings if f.saga is not None]
    expected, counts = whole_log(records, int(cert["issued_at"]) * 1000, alive)
    assert [(f.check, f.saga) for f in sagas] == [
        ("after_end", ended[0]),
        ("in_progress" if alive else "unrecovered", "open-saga"),
    ]
    assert sagas == expected
    assert {k: cert["counts"][k] for k in counts} == counts
    assert cert["counts"]["records"] == len(records)
    assert cert["ok"] is False


def _home_of_ended_sagas(home: Path, sagas: int) -> Path:
    with AgentKit(home=home) as kit:
        for start in range(0, sagas, 250):
            entries = []
            for index in range(start, min(sagas, start + 250)):
                entries += [
                    Entry(record.kind, record.saga, record.data, index) for record in _saga(index)
                ]
            kit.store.append(entries, sync=False)
    return home


def _certify_peak(home: Path) -> int:
    tracemalloc.start()
    try:
        cert, _ = certify(home)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert cert["ok"] is True
    return peak


def test_a_full_certify_peaks_the_same_on_a_log_twice_as_long(tmp_path: Path) -> None:
    small = _home_of_ended_sagas(tmp_path / "small", 2_000)  # 8,000 records
    large = _home_of_ended_sagas(tmp_path / "large", 4_000)  # 16,000
    # the larger first: what the first certify allocates for good counts against it
    large_peak, small_peak = _certify_peak(large), _certify_peak(small)
    # holding the records would add about 8 MB; the pass holds a frontier and the open sagas
    assert large_peak < small_peak + 256 * 1024, (small_peak, large_peak)


def test_an_end_that_says_suspended_is_judged_with_the_log_s_last_time() -> None:
    """A saga whose end says suspended expires by the time of the log's end, not by the time
    its end was read (the pass does not know that yet)."""
    kinds: list[tuple[str, str, dict[str, JSONValue], int]] = [
        ("saga.begin", "a", {"name": "n", "owner": "o1"}, 1000),
        ("saga.suspended", "a", {"expires_at": 5000}, 2000),
        ("saga.end", "a", {"status": "suspended"}, 3000),
        ("saga.begin", "b", {"name": "n", "owner": "o1"}, 9000),
        ("saga.end", "b", {"status": "committed"}, 9000),
    ]
    records = [
        Record(seq, ts, kind, saga, dict(data), f"h{seq - 1}", f"h{seq}")
        for seq, (kind, saga, data, ts) in enumerate(kinds, 1)
    ]
    expected = whole_log(records, 9000, False)
    assert [f.check for f in expected[0]] == ["suspension_expired"]
    assert streamed(records, 9000, False, late_now=True)[:2] == expected


def test_a_pass_refuses_an_observer_with_each(home: Path) -> None:
    """``each`` reads the log through its verified records, where no stored line is seen: an
    ``observer`` given with it would never be called, so the two together are refused."""
    with AgentKit(home=home) as kit:
        add = kit.tool(semantics=REVERSIBLE)(_add)
        with kit.transaction("done"):
            add(1)
    seen: list[Record] = []
    with pytest.raises(ValueError, match="an observer or each, not both"):
        stream_log(FileLogSource(home), observer=lambda *_: None, each=seen.append)
    assert seen == []
    assert stream_log(FileLogSource(home), each=seen.append).chain.ok
    assert [r.kind for r in seen][-1] == "saga.end"


class _SecondReadFails(FileLogSource):
    """A home's file log whose second read fails as an unreadable segment would."""

    def __init__(self, home: Path) -> None:
        super().__init__(home)
        self.reads = 0

    def records(self) -> Generator[Record]:
        self.reads += 1
        if self.reads > 1:
            raise OSError("segment unreadable")
        yield from super().records()


def test_a_second_read_that_fails_publishes_no_checkpoint(home: Path) -> None:
    """The second read happens before the checkpoint is published: when it fails, certify
    fails with the store's error and nothing is published or certified."""
    with AgentKit(home=home) as kit:
        add = kit.tool(semantics=REVERSIBLE)(_add)
        with kit.transaction("done") as saga:
            add(1)
    late = Entry("step.done", saga.id, {"ordinal": 2, "tool": "late", "result": None}, 0)
    with FileLogStore(home) as store:  # after the kit's last checkpoint
        store.append([late], sync=True)
    latest = home / "checkpoints" / "latest.note"
    before = latest.read_bytes() if latest.exists() else None
    failing = _SecondReadFails(home)
    with pytest.raises(OSError, match="segment unreadable"):
        certify(home, failing)
    assert failing.reads == 2  # the late record reopened the saga: a second read
    assert (latest.read_bytes() if latest.exists() else None) == before
    cert, findings = certify(home)  # the same home read twice without failing: published
    assert latest.read_bytes() != before
    assert [(f.check, f.saga) for f in findings if f.saga] == [("after_end", saga.id)]
    assert cert["checkpoint"] == latest.read_text()


class _RewrittenBetweenReads(FileLogSource):
    """A hostile writer rewrites record 1 after certify's first read, before its second."""

    reads = 0

    def records(self) -> Generator[Record, None, None]:
        self.reads += 1
        if self.reads == 2:
            log = self.home / "log.jsonl"
            log.write_bytes(log.read_bytes().replace(b'"name":"done"', b'"name":"dune"', 1))
        yield from super().records()


def test_a_log_changed_between_the_two_reads_publishes_no_checkpoint(home: Path) -> None:
    """The second read finds the log rewritten: the certificate is NOT CERTIFIED with a
    CRITICAL chain finding, and no checkpoint is published over the first read (it would
    vouch for a log that no longer exists)."""
    with AgentKit(home=home) as kit:
        add = kit.tool(semantics=REVERSIBLE)(_add)
        with kit.transaction("done") as saga:
            add(1)
    late = Entry("step.done", saga.id, {"ordinal": 2, "tool": "late", "result": None}, 0)
    with FileLogStore(home) as store:
        store.append([late], sync=True)
    latest = home / "checkpoints" / "latest.note"
    before = latest.read_bytes() if latest.exists() else None
    source = _RewrittenBetweenReads(home)
    cert, findings = certify(home, source)
    assert source.reads == 2
    assert not cert["ok"]
    changed = [f for f in findings if "changed while certify read it" in f.message]
    assert [f.check for f in changed] == ["chain"]
    assert (latest.read_bytes() if latest.exists() else None) == before


def test_a_second_read_that_fails_counts_every_saga_once() -> None:
    """Reopened sagas, true (a record after an end) and false (the filter's mistake, which a
    tiny filter makes often), are each counted once when the second read stops short: each is
    judged from its records before its reopening (read again, unchanged up to it) and those
    after it (kept by the first pass)."""
    records = [r for i in range(40) for r in _saga(i)]
    late = _saga(3, late=True)[-1]
    records.insert(100, late._replace(seq=101, prev="h100", hash="h101"))
    records += _saga(40)
    records = [r._replace(seq=n, prev=f"h{n - 1}", hash=f"h{n}") for n, r in enumerate(records, 1)]
    judge = LogJudge(lambda _: False, 0, (1, 1))
    for record in records:
        judge.add(record)
    assert len(judge.reopened) > 10  # mostly the filter's mistakes
    judge.finish(lambda: records[:-1])  # the log lost its last record meanwhile
    chain = VerifyReport(True, len(records))
    findings = judge.findings(chain, None)
    assert judge.problem is not None
    assert findings[0].check == "chain"
    expected, counts = whole_log(records, 0, False)
    assert [f for f in findings if f.saga is not None] == expected
    assert judge.counts(findings)["sagas"] == 41
    assert {s.value: judge.counts(findings)[s.value] for s in SagaStatus} == counts


def test_a_second_read_that_differs_before_a_reopening_keeps_the_verdict_at_the_end() -> None:
    """A reopened saga whose reopening record the second read did not reach unchanged keeps
    the verdict given at its end: still counted once, the log NOT CERTIFIED."""
    records = [r for i in range(3) for r in _saga(i)] + _saga(0, late=True)[-1:]
    records = [r._replace(seq=n, prev=f"h{n - 1}", hash=f"h{n}") for n, r in enumerate(records, 1)]
    judge = LogJudge(lambda _: False, 0)
    for record in records:
        judge.add(record)
    assert list(judge.reopened) == ["saga-00000000"]
    changed = [r._replace(hash=f"{r.hash}x") for r in records]  # record 1 changed: every hash
    judge.finish(lambda: changed)
    findings = judge.findings(VerifyReport(True, len(records)), None)
    assert [f.check for f in findings] == ["chain"]  # no after_end: its late record unread
    assert judge.counts(findings)["sagas"] == judge.counts(findings)["committed"] == 3
