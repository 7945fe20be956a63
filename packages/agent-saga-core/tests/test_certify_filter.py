"""The full certify's filter of ended sagas (:mod:`agent_saga.proofs._bloom`) grows with them:
every id added is held, ids not added are taken for held ones no more often than the stated
bound, memory stays within the stated bytes an id, and a small log (or :class:`LogJudge` over
records in memory) allocates a small filter."""

from __future__ import annotations

import math
import tracemalloc

from agent_saga._log.records import Record
from agent_saga._log.store import VerifyReport
from agent_saga.proofs._bloom import FIRST_CAPACITY, PROBES, Ended
from agent_saga.proofs._certify import certify_records
from agent_saga.proofs._judge import LogJudge


def _per_id(index: int, probes: int) -> float:
    """Bytes an id in filter ``index`` at capacity, as the module docstring states them."""
    return math.ceil(probes / 8) / -math.log1p(-(2.0 ** (-1 - index / probes)))


def _check(ended: Ended, count: int, probes: int) -> float:
    """Add ``count`` ids, check that all are held and the memory bound; the rate of false
    positives over as many ids never added."""
    added = [f"saga-{n:08d}" for n in range(count)]
    for saga_id in added:
        ended.add(saga_id)
    assert all(saga_id in ended for saga_id in added)
    newest = len(ended.filters) - 1
    assert ended.size <= count * 2 * _per_id(newest, probes) + len(ended.filters[0].table)
    return sum(f"fresh-{n:08d}" in ended for n in range(count)) / count


def test_a_filter_that_grows_keeps_false_positives_under_its_bound() -> None:
    # four probes, so that false positives are frequent enough to measure
    ended = Ended(capacity=256, probes=4)
    rate = _check(ended, 60_000, 4)
    assert len(ended.filters) == 8  # seven growths
    bound = sum(2.0 ** (-4 - index) for index in range(8))  # 2**-(k+i) each: 0.1245
    expected = sum((1 - (1 - 1 / f.length) ** f.count) ** 4 for f in ended.filters)
    # one filter's rate, over 60,000 ids never added: 0.1183 (0.1236 expected from its sizes)
    assert 0.9 * expected < rate <= bound, (rate, expected, bound)


def test_the_default_filter_over_several_growths() -> None:
    ended = Ended()
    count = FIRST_CAPACITY * 15  # four filters full
    assert _check(ended, count, PROBES) == 0.0  # 15,360 * 1.82e-12 expected
    assert len(ended.filters) == 4
    assert ended.size / count < 7.8  # 7.71 bytes an id


def _saga(index: int) -> list[Record]:
    sid, seq = f"saga-{index:04d}", index * 2
    return [
        Record(seq + 1, seq, "saga.begin", sid, {"name": "n"}, f"h{seq}", f"h{seq + 1}"),
        Record(
            seq + 2, seq, "saga.end", sid, {"status": "committed"}, f"h{seq + 1}", f"h{seq + 2}"
        ),
    ]


def test_a_certify_of_a_few_records_allocates_a_small_filter() -> None:
    records = [record for index in range(20) for record in _saga(index)]
    certify_records(records, VerifyReport(True, len(records)), None, lambda _: True)  # warm
    tracemalloc.start()
    try:
        findings = certify_records(records, VerifyReport(True, len(records)), None, lambda _: True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert findings == []
    assert peak < 256 * 1024, peak  # the first filter is 7,395 bytes (a fixed one was 8 MiB)
    judge = LogJudge(lambda _: True)
    assert judge.ended.size < 8 * 1024
