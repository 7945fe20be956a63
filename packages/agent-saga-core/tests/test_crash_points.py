"""Every crash point of a three-step saga, enumerated: crash after each file-system operation.

The saga runs on the simulated file system. For every position k it is run again with a crash
right before operation k+1, then the disk either keeps every unsynced write (a process crash) or
loses all of them (the worst power cut). Recovery runs in a new "process" and the invariants are
checked against the external ledger, which the crash does not touch.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import Literal

import pytest
from agent_saga import (
    AgentKit,
    CompensatorRegistry,
    FileLogStore,
    MemoryKillSwitch,
    SagaRolledBack,
    SagaStatus,
)
from agent_saga.testing import SimCrash, SimFileSystem

HOME = "/home"
Mode = Literal["keep", "drop"]


class World:
    """The external systems: effects happen once per idempotency key; calls are counted."""

    def __init__(self) -> None:
        self.effects: dict[str, set[str]] = {"charge": set(), "refund": set()}
        self.calls: Counter[str] = Counter()

    def effect(self, action: str, key: str) -> None:
        self.calls[action] += 1
        self.effects[action].add(key)


def make_kit(fs: SimFileSystem, world: World) -> AgentKit:
    registry = CompensatorRegistry()
    kit = AgentKit(
        home=HOME,
        store=FileLogStore(HOME, fs=fs, preallocate=512),
        kill_switch=MemoryKillSwitch(),
        registry=registry,
    )

    @kit.compensator("cp.refund")
    def refund(idempotency_key: str) -> None:
        world.effect("refund", idempotency_key.removesuffix("/compensate"))

    def landed(idempotency_key: str, amount: int) -> bool:
        return idempotency_key in world.effects["charge"]

    @kit.tool(name="cp.charge", compensate="cp.refund", probe=landed)
    def charge(amount: int, idempotency_key: str) -> None:
        world.effect("charge", idempotency_key)

    kit.charge = charge  # type: ignore[attr-defined]
    return kit


def workload(kit: AgentKit, fail: bool) -> None:
    try:
        with kit.transaction("three steps"):
            for amount in (10, 20, 30):
                kit.charge(amount)  # type: ignore[attr-defined]
            if fail:
                raise RuntimeError("the agent gave up")
    except SagaRolledBack:
        pass


def run_with_crash(k: int, mode: Mode, fail: bool) -> tuple[World, list[str]]:
    fs = SimFileSystem()
    world = World()
    fs.crash_after = k
    with contextlib.suppress(SimCrash):
        workload(make_kit(fs, world), fail)
    if mode == "keep":
        for file in fs.files.values():  # a process crash: the kernel keeps every write
            file.durable, file.pending = bytearray(file.live), []
        fs.durable_names |= set(fs.files) | fs.dirs
    fs.rng.seed(k)
    if mode == "drop":
        fs.rng.random = lambda: 0.45  # type: ignore[method-assign]  # every unsynced op dropped
    fs.power_loss()
    kit = make_kit(fs, world)
    report = kit.recover()
    statuses = [s.status.value for s in report.recovered]
    problems = []
    if report.needs_human:
        problems.append(f"needs human: {report.needs_human}")
    if not kit.verify().ok:
        problems.append("log does not verify")
    ends = {r.saga: r.data["status"] for r in kit.store.records() if r.kind == "saga.end"}
    begun = {r.saga for r in kit.store.records() if r.kind == "saga.begin"}
    if begun - set(ends):
        problems.append(f"unsettled sagas {begun - set(ends)} ({statuses})")
    committed = any(status == SagaStatus.COMMITTED.value for status in ends.values())
    charges, refunds = world.effects["charge"], world.effects["refund"]
    if not refunds <= charges:
        problems.append("refunded something never charged")
    if committed and refunds:
        problems.append("refunded a committed saga's charge")
    if not committed and charges - refunds:
        problems.append(f"charges left unrefunded: {len(charges - refunds)}")
    return world, problems


def total_operations(fail: bool) -> int:
    fs = SimFileSystem()
    workload(make_kit(fs, World()), fail)
    return fs.operations


@pytest.mark.parametrize("fail", [False, True], ids=["commits", "rolls-back"])
@pytest.mark.parametrize("mode", ["keep", "drop"])
def test_every_crash_point_recovers(mode: Mode, fail: bool) -> None:
    total = total_operations(fail)
    assert total > 10
    failures = []
    for k in range(total + 1):
        _, problems = run_with_crash(k, mode, fail)
        if problems:
            failures.append((k, problems))
    assert failures == [], failures[:3]
