"""The write-ahead rule, observed on the real file system: fsync before the effect."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from agent_saga import REVERSIBLE, AgentKit, Entry, FileLogStore, Kind, SagaRolledBack
from agent_saga.testing import FaultyFileSystem


class FsyncProbe(FaultyFileSystem):
    """Records the log file's size at every fsync of it (the real fsync still happens)."""

    def __init__(self, log: Path) -> None:
        super().__init__()
        self.log = log
        self.synced_sizes: list[int] = []

    def fsync(self, fd: int) -> None:
        super().fsync(fd)
        self._note(fd)

    def datasync(self, fd: int) -> None:
        super().datasync(fd)
        self._note(fd)

    def _note(self, fd: int) -> None:
        if self.log.exists() and os.path.samestat(os.fstat(fd), os.stat(self.log)):
            # The log's bytes end where its preallocated zeros begin.
            self.synced_sizes.append(len(self.log.read_bytes().rstrip(b"\x00")))

    @property
    def durable_bytes(self) -> int:
        return max(self.synced_sizes, default=0)


@pytest.fixture
def probe(home: Path) -> FsyncProbe:
    return FsyncProbe(home / "log.jsonl")


def kit_with(home: Path, probe: FsyncProbe) -> AgentKit:
    return AgentKit(home=home, store=FileLogStore(home, fs=probe))


def on_disk(path: Path) -> list[bytes]:
    """The log's records as stored now (without the preallocated zeros after them)."""
    return path.read_bytes().rstrip(b"\x00").splitlines(keepends=True)


def test_intent_is_fsynced_before_a_compensable_effect(home: Path, probe: FsyncProbe) -> None:
    observed: list[tuple[int, int, list[bytes]]] = []

    with kit_with(home, probe) as kit:

        @kit.tool(name="wa.charge", compensate=lambda result: None)
        def charge(amount: int) -> int:
            lines = on_disk(probe.log)
            observed.append((probe.durable_bytes, sum(len(line) for line in lines), lines))
            return amount

        with kit.transaction("t"):
            charge(5)

    durable, size, lines = observed[0]
    # When the effect runs, everything written so far (ending with the intent) is fsynced.
    assert durable == size
    assert b'"kind":"step.intent"' in lines[-1]
    assert b'"wa.charge"' in lines[-1]


def test_reversible_step_takes_the_fast_path(home: Path, probe: FsyncProbe) -> None:
    syncs_at_effect: list[int] = []
    with kit_with(home, probe) as kit:

        @kit.tool(name="wa.read", semantics=REVERSIBLE)
        def read() -> int:
            syncs_at_effect.append(len(probe.synced_sizes))
            return 1

        before = len(probe.synced_sizes)
        with kit.transaction("t"):
            read()
            read()
        assert syncs_at_effect == [before, before]
        # The terminal record made all of them durable.
        assert len(probe.synced_sizes) > before
        assert probe.durable_bytes == sum(len(line) for line in on_disk(probe.log))


def test_irreversible_refusal_never_runs(home: Path) -> None:
    calls: list[int] = []
    with AgentKit(home=home) as kit:

        @kit.tool(name="wa.wire", semantics="irreversible")
        def wire(amount: int) -> None:
            calls.append(amount)

        with pytest.raises(SagaRolledBack) as info, kit.transaction("t"):
            wire(10)
    assert calls == []
    assert "no approval channel" in str(info.value.cause)


@pytest.mark.parametrize("fails", [False, True])
def test_terminal_record_is_durable_when_the_block_returns(
    home: Path, probe: FsyncProbe, fails: bool
) -> None:
    with kit_with(home, probe) as kit:

        @kit.tool(name="wa.step", compensate=lambda result: None)
        def step() -> int:
            return 1

        try:
            with kit.transaction("t"):
                step()
                if fails:
                    raise RuntimeError("x")
        except SagaRolledBack:
            pass
        lines = on_disk(probe.log)
        assert b'"kind":"saga.end"' in lines[-1]
        assert probe.durable_bytes == sum(len(line) for line in on_disk(probe.log))


def test_order_of_records_for_one_step(home: Path) -> None:
    with AgentKit(home=home) as kit:

        @kit.tool(name="wa.step2", compensate=lambda result: None)
        def step(n: int) -> int:
            return n

        with kit.transaction("t"):
            step(1)
        assert [r.kind for r in kit.store.records()] == [
            Kind.SAGA_BEGIN,
            Kind.STEP_INTENT,
            Kind.STEP_DONE,
            Kind.SAGA_END,
        ]


def test_group_commit_shares_fsyncs(home: Path, probe: FsyncProbe) -> None:
    import threading

    store = FileLogStore(home, fs=probe)

    barrier = threading.Barrier(8)

    def writer(n: int) -> None:
        barrier.wait()
        for i in range(20):
            store.append([Entry("test", None, {"n": n, "i": i}, 0)], sync=True)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store.close()
    assert sum(1 for _ in FileLogStore(home).records()) == 160
    # 160 durable appends, but concurrent writers shared fsyncs.
    assert len(probe.synced_sizes) < 160
