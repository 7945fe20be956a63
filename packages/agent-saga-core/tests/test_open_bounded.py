"""Opening a kit, running a step, recovering and closing cost what is new, not the log's age.

A home with a few sealed segments has one record of its first segment edited (same length):
anything that reads that segment again fails (``verify`` names it). A kit opened afterwards
still opens, runs a saga, recovers (with a reservation to settle), publishes its checkpoint at
close, and the saga index answers, without an error: none of them read the sealed segments
before the last checkpoint's frontier and the index's point.
"""

from __future__ import annotations

import threading
import time
from decimal import Decimal
from pathlib import Path

from agent_saga import REVERSIBLE, AgentKit, Budget, Entry, FileBudgetStore, FileLogStore, read_log
from agent_saga._log.segments import SEGMENTS_DIR


def kit_on(home: Path, **options: object) -> tuple[AgentKit, object]:
    store = FileLogStore(home, segment_records=40)
    kit = AgentKit(home=home, store=store, **options)  # type: ignore[arg-type]

    @kit.tool(semantics=REVERSIBLE)
    def add(x: int) -> int:
        return x + 1

    return kit, add


def test_a_reopened_kit_reads_no_sealed_segment_its_checkpoint_and_index_cover(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    kit, add = kit_on(home)
    ids = []
    for n in range(20):
        with kit.transaction(f"saga-{n}") as saga:
            add(n)  # type: ignore[operator]
            add(n + 1)  # type: ignore[operator]
            ids.append(saga.id)
    assert kit.recover().recovered == ()  # catches the index up
    kit.close()  # publishes a checkpoint and its frontier
    assert len(list((home / SEGMENTS_DIR).glob("*.jsonl"))) >= 2
    total = len(list(read_log(home)))
    first = home / "log.jsonl"
    raw = first.read_bytes()
    at = raw.index(b'"x":3')
    first.write_bytes(raw[:at] + b'"x":4' + raw[at + 5 :])  # same length: sealed, edited
    budgets = FileBudgetStore(home)
    budgets.reserve(
        "ops", "all", Decimal(5), Decimal(100), saga=ids[-1], ordinal=1, keep_spent=True,
        until=None,
    )  # fmt: skip  # a reservation left by a dead process, of a committed saga

    kit, add = kit_on(home, rules=[Budget("ops", 100, tools="pay", store=budgets)])
    with kit.transaction("one-step"):
        add(1)  # type: ignore[operator]
    report = kit.recover()
    assert report.recovered == ()
    assert report.live == ()
    assert budgets.holds("ops") == []  # settled from the saga's outcome, read via the index
    assert budgets.usage("ops", "all") == (Decimal(5), Decimal(0))
    published = kit.checkpoint()
    assert published.size == total + 4  # begin, intent, done, end
    checkpointer = kit.checkpointer
    kit.close()
    assert checkpointer is not None
    assert checkpointer.last_error is None
    store = FileLogStore(home, segment_records=40)
    try:
        verdict = store.verify()  # a full read does meet the edited segment
    finally:
        store.close()
    assert not verdict.ok
    assert verdict.error is not None
    assert verdict.error.path == str(first)


def test_the_writer_hands_indexing_to_its_own_thread(tmp_path: Path) -> None:
    store = FileLogStore(tmp_path)
    index = store.saga_index
    assert index is not None
    try:
        index.refresh()

        batch = [Entry("saga.begin", f"s{n}", {}, n) for n in range(300)]
        store.append(batch, sync=True)  # the hook only wakes the indexer thread
        thread = index.behind.thread
        assert thread is not None
        assert thread is not threading.current_thread()
        assert thread.name == "agent-saga-index"
        deadline = time.monotonic() + 20
        while index._known < 300 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert index._known == 300  # indexed behind the writer, with no reader asking
        assert index.unfinished()[:2] == ["s0", "s1"]
    finally:
        store.close()
    assert not thread.is_alive()  # closing the store stops it
