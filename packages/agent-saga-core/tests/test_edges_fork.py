"""A kit used across ``os.fork()``: an inherited store never writes; children that open their
own kits (``fork`` or ``spawn``) share the home safely, several at once.

The attack as a careless user makes it: open a kit, then start ``multiprocessing`` workers with
the default start method on Linux (fork) that keep using it.
"""

from __future__ import annotations

import multiprocessing
import sys
import textwrap
from multiprocessing.queues import Queue
from pathlib import Path

import pytest
from agent_saga import (
    REVERSIBLE,
    AgentKit,
    SagaStatus,
    build_history,
    saga_scope,
    tool,
    verify_file,
)
from agent_saga._kit import defaults

WORKERS = 4
ROUNDS = 15


def _statuses(home: Path) -> list[SagaStatus]:
    with AgentKit(home=home, checkpoints=False) as kit:
        return [s.status for s in build_history(kit.store.records()).sagas]


def test_children_forked_with_an_open_kit_refuse_to_write(home: Path) -> None:
    fork = multiprocessing.get_context("fork")
    results: Queue[str] = fork.Queue()
    kit = AgentKit(home=home)
    effects: list[int] = []

    @kit.tool(name="fork.note", compensate=lambda n: None)
    def note(n: int) -> int:
        effects.append(n)
        return n

    with kit.transaction("before the fork"):
        note(0)

    def child(number: int) -> None:
        outcomes = set()
        for round_ in range(ROUNDS):
            try:
                with kit.transaction(f"child {number}"):
                    note(round_)
                outcomes.add("wrote")
            except Exception as exc:
                outcomes.add(type(exc).__name__)
        kit.close()  # must release nothing the parent holds
        results.put(",".join(sorted(outcomes)))

    workers = [fork.Process(target=child, args=(n,)) for n in range(WORKERS)]
    for worker in workers:
        worker.start()
    for round_ in range(ROUNDS):  # the parent keeps writing meanwhile
        with kit.transaction("parent"):
            note(round_)
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    assert sorted(results.get(timeout=5) for _ in workers) == ["InheritedStoreError"] * WORKERS
    with kit.transaction("after the children closed"):  # owner lock and file still ours
        note(99)
    kit.close()
    assert verify_file(home / "log.jsonl").ok
    assert _statuses(home) == [SagaStatus.COMMITTED] * (ROUNDS + 2)


def test_an_inherited_kit_says_so_at_the_transaction(home: Path) -> None:
    fork = multiprocessing.get_context("fork")
    results: Queue[str] = fork.Queue()
    with AgentKit(home=home) as kit:

        def child() -> None:
            try:
                kit.transaction("child").__enter__()
            except Exception as exc:
                results.put(str(exc))

        worker = fork.Process(target=child)
        worker.start()
        worker.join(30)
        message = results.get(timeout=5)
    assert "fork" in message
    assert "create a new AgentKit" in message


@tool(name="fork.draft", semantics=REVERSIBLE)
def draft(n: int) -> int:
    return n


def _child_with_its_own_default_kit(home: str, rounds: int) -> None:
    for round_ in range(rounds):
        with saga_scope("child"):
            draft(round_)


def test_forked_children_with_their_own_default_kits_write_at_once(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_SAGA_HOME", str(home))
    with saga_scope("parent"):  # the parent's default kit exists before the fork
        draft(0)
    fork = multiprocessing.get_context("fork")
    workers = [
        fork.Process(target=_child_with_its_own_default_kit, args=(str(home), ROUNDS))
        for _ in range(WORKERS)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    defaults._Defaults.kits["kit"].close()  # this test's own (see conftest.py)
    assert verify_file(home / "log.jsonl").ok
    assert _statuses(home) == [SagaStatus.COMMITTED] * (1 + WORKERS * ROUNDS)


SPAWNED = textwrap.dedent(
    """
    from agent_saga import AgentKit, REVERSIBLE

    def run(home: str, rounds: int) -> None:
        with AgentKit(home=home) as kit:
            @kit.tool(name="spawn.draft", semantics=REVERSIBLE)
            def draft(n: int) -> int:
                return n

            for round_ in range(rounds):
                with kit.transaction("spawned"):
                    draft(round_)
    """
)


def test_spawned_children_with_their_own_kits_write_at_once(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "spawned_worker.py").write_text(SPAWNED, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    import spawned_worker  # type: ignore[import-not-found]

    spawn = multiprocessing.get_context("spawn")
    workers = [spawn.Process(target=spawned_worker.run, args=(str(home), 5)) for _ in range(3)]
    try:
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(120)
            assert worker.exitcode == 0
    finally:
        sys.modules.pop("spawned_worker", None)
    assert verify_file(home / "log.jsonl").ok
    assert _statuses(home) == [SagaStatus.COMMITTED] * 15
