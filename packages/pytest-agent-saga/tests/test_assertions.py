"""``assert_rolled_back``, ``assert_exactly_once``, ``assert_log_verifies`` and the ledger.

Each assertion passes on what the engine really leaves behind and fails, with the saga, the
step and the reason, on a log or a counter that shows the problem.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from agent_saga import AgentKit, Entry, MemoryLogStore, SagaRolledBack, SequentialIds
from agent_saga.testing import Ledger
from pytest_agent_saga import (
    JournalLedger,
    assert_exactly_once,
    assert_log_verifies,
    assert_rolled_back,
)


def trip(kit: AgentKit, ledger: Ledger | JournalLedger, *, fail: bool = True) -> None:
    """Book a hotel (compensable), charge (compensable), note (reversible, no compensation)."""

    @kit.compensator("trip.cancel")
    def cancel(idempotency_key: str) -> None:
        ledger.record("cancel", idempotency_key)

    @kit.compensator("trip.refund")
    def refund(idempotency_key: str) -> None:
        ledger.record("refund", idempotency_key)

    @kit.tool(name="trip.book", compensate="trip.cancel")
    def book(city: str, idempotency_key: str = "") -> None:
        ledger.record("book", idempotency_key)

    @kit.tool(name="trip.charge", compensate="trip.refund")
    def charge(amount: int, idempotency_key: str = "") -> None:
        ledger.record("charge", idempotency_key)

    @kit.tool(name="trip.note", semantics="reversible")
    def note(text: str, idempotency_key: str = "") -> None:
        ledger.record("note", idempotency_key)

    with kit.transaction("trip"):
        book("Oslo")
        note("booked")
        charge(300)
        if fail:
            raise RuntimeError("the agent gave up")


def test_assert_rolled_back_passes_on_a_real_rollback(saga_kit: AgentKit) -> None:
    ledger = Ledger()
    with pytest.raises(SagaRolledBack) as caught:
        trip(saga_kit, ledger)
    view = assert_rolled_back(caught.value, saga_kit)
    assert view.id == "saga-0001"
    assert ledger.actions() == ["book", "note", "charge", "refund", "cancel"]
    assert_rolled_back(caught.value.report, saga_kit.store)
    assert_rolled_back("saga-0001", list(saga_kit.store.records()))


def test_assert_rolled_back_reads_a_home_on_disk(saga_kit: AgentKit, saga_home: Path) -> None:
    with pytest.raises(SagaRolledBack):
        trip(saga_kit, Ledger())
    assert assert_rolled_back("saga-00", saga_home).status.value == "rolled_back"
    assert_rolled_back("saga-0001", saga_home / "log.jsonl")


def test_assert_rolled_back_fails_on_a_committed_saga(saga_kit: AgentKit) -> None:
    trip(saga_kit, Ledger(), fail=False)
    with pytest.raises(AssertionError, match=r"saga saga-0001 ended committed, not rolled back$"):
        assert_rolled_back("saga-0001", saga_kit)


def test_assert_rolled_back_names_a_failed_compensation(saga_kit: AgentKit) -> None:
    @saga_kit.compensator("trip.refund")
    def refund() -> None:
        raise ConnectionError("bank down")

    @saga_kit.tool(name="trip.charge", compensate="trip.refund")
    def charge(amount: int) -> None:
        pass

    with pytest.raises(SagaRolledBack) as caught, saga_kit.transaction("t"):
        charge(3)
        raise RuntimeError("give up")
    with pytest.raises(
        AssertionError,
        match=r"ended needs_human, not rolled back: failed compensation\(s\): step #1 "
        r"trip\.charge \(ConnectionError: bank down\)",
    ):
        assert_rolled_back(caught.value, saga_kit)


def test_assert_rolled_back_with_a_ledger_finds_an_effect_left_behind(saga_kit: AgentKit) -> None:
    ledger = Ledger()
    with pytest.raises(SagaRolledBack) as caught:
        trip(saga_kit, ledger)
    with pytest.raises(
        AssertionError,
        match=r"not fully rolled back: step #2 trip\.note left an effect and declares no "
        r"compensation$",
    ):
        assert_rolled_back(caught.value, saga_kit, ledger=ledger)


def forged_log(order: list[int]) -> MemoryLogStore:
    """A chained log whose rollback compensates the steps in ``order``."""
    store = MemoryLogStore()
    entries = [Entry("saga.begin", "s1", {"name": "forged"}, 0)]
    for n in (1, 2, 3):
        intent: dict[str, Any] = {
            "ordinal": n,
            "tool": f"t{n}",
            "semantics": "compensable",
            "args": {},
            "compensation": {"name": "undo", "recoverable": True},
            "idempotency_key": f"k{n}",
        }
        entries.append(Entry("step.intent", "s1", intent, 0))
        entries.append(Entry("step.done", "s1", {"ordinal": n, "tool": f"t{n}", "result": None}, 0))
    entries.append(Entry("rollback.begin", "s1", {"from_ordinal": 1}, 0))
    for n in order:
        entries.append(Entry("compensation.intent", "s1", {"ordinal": n, "tool": f"t{n}"}, 0))
        entries.append(Entry("compensation.done", "s1", {"ordinal": n, "tool": f"t{n}"}, 0))
    entries.append(Entry("saga.end", "s1", {"status": "rolled_back"}, 0))
    store.append(entries, sync=True)
    return store


def test_assert_rolled_back_checks_the_reverse_order() -> None:
    assert_rolled_back("s1", forged_log([3, 2, 1]))
    with pytest.raises(
        AssertionError, match=r"the compensation of step #3 t3 ran after that of step #1 t1$"
    ):
        assert_rolled_back("s1", forged_log([1, 3, 2]))


def test_assert_rolled_back_names_steps_never_compensated() -> None:
    with pytest.raises(AssertionError, match=r"step #1 t1 was not compensated \(pending\)$"):
        assert_rolled_back("s1", forged_log([3, 2]))
    with pytest.raises(TypeError, match="expected SagaRolledBack"):
        assert_rolled_back(42, forged_log([3, 2, 1]))  # type: ignore[arg-type]


def test_assert_exactly_once_with_a_ledger(tmp_path: Path) -> None:
    ledger = JournalLedger(tmp_path / "journal")
    ledger.record("charge", "k1")
    ledger.record("charge", "k2")
    ledger.record("refund", "k1")
    assert_exactly_once(ledger)
    assert_exactly_once(ledger, action="charge", keys=["k1", "k2"])
    ledger.record("charge", "k2")
    with pytest.raises(AssertionError, match=r"^not exactly once: key k2 took effect 2 times"):
        assert_exactly_once(ledger, action="charge")
    with pytest.raises(AssertionError, match="key k3 never took effect"):
        assert_exactly_once(ledger, action="refund", keys=["k1", "k3"])


def test_assert_exactly_once_with_the_users_own_counters() -> None:
    sent = Counter({"as1-a": 1, "as1-b": 1})
    assert_exactly_once(sent)
    sent["as1-b"] += 1
    with pytest.raises(AssertionError, match="key as1-b took effect 2 times"):
        assert_exactly_once(sent)
    assert_exactly_once(["as1-a", "as1-b"], keys=["as1-a"])
    with pytest.raises(AssertionError, match="key as1-a took effect 2 times"):
        assert_exactly_once(["as1-a", "as1-a"])
    memory = Ledger()
    memory.record("email", "as1-c")
    memory.record("email", "as1-c")
    with pytest.raises(AssertionError, match=r"key as1-c took effect 2 times \('email'\)"):
        assert_exactly_once(memory)
    with pytest.raises(TypeError, match="expected a ledger"):
        assert_exactly_once(3)


def test_assert_log_verifies_on_every_kind_of_source(saga_kit: AgentKit, saga_home: Path) -> None:
    trip(saga_kit, Ledger(), fail=False)
    assert assert_log_verifies(saga_kit).records == 8
    assert_log_verifies(saga_kit.store)
    assert_log_verifies(saga_home)
    assert_log_verifies(saga_home / "log.jsonl")


def test_assert_log_verifies_fails_on_an_edited_record(saga_kit: AgentKit, saga_home: Path) -> None:
    trip(saga_kit, Ledger(), fail=False)
    saga_kit.close()
    log = saga_home / "log.jsonl"
    raw = log.read_bytes()
    log.write_bytes(raw.replace(b'"city":"Oslo"', b'"city":"Rome"'))
    with pytest.raises(
        AssertionError, match=r"does not verify after 1 good record\(s\): log corrupt"
    ):
        assert_log_verifies(saga_home)


def test_assert_log_verifies_fails_on_a_tampered_memory_store() -> None:
    with AgentKit(store="memory", ids=SequentialIds(), home=".") as kit:
        with kit.transaction("t"):
            pass
        records = list(kit.store.records())
        assert isinstance(kit.store, MemoryLogStore)
        kit.store.tamper(0, records[0]._replace(data={"name": "other"}))
        with pytest.raises(AssertionError, match="does not verify after 0 good record"):
            assert_log_verifies(kit)


def test_the_journal_ledger_sees_a_killed_childs_effects(tmp_path: Path) -> None:
    ledger = JournalLedger(tmp_path / "j" / "journal")
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        ledger.record("charge", "k1")
        os.kill(os.getpid(), 9)
    os.waitpid(pid, 0)
    assert ledger.events() == [("charge", "k1")]
    assert ledger.count("charge", "k1") == 1
    assert len(ledger) == 1
    assert ledger.actions() == ["charge"]


def test_the_journal_ledger_refuses_what_would_corrupt_it(tmp_path: Path) -> None:
    ledger = JournalLedger(tmp_path / "journal")
    for action, key in [("a\tb", "k"), ("a", "k\n"), ("", "k"), ("a", "x" * 513)]:
        with pytest.raises(ValueError, match="ledger"):
            ledger.record(action, key)
    assert ledger.events() == []
    ledger.record("a", "")
    ledger.record("a", "")
    assert ledger.duplicates() == []  # events without a key are not deduplicated
