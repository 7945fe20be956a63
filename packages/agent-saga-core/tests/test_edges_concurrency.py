"""Promises under concurrency: branches in their own savepoints, one reusable ``Transaction``
entered by two tasks or threads, and arguments another thread mutates while a call is gated.

Each test performs the misuse as a careless (or hostile) caller would and checks what the log,
the compensations and the tool itself saw.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from agent_saga import (
    AgentKit,
    Approvals,
    MaxValue,
    Record,
    SagaRolledBack,
    SagaStatus,
    SequentialIds,
    build_history,
    require_approval,
    submit_vote,
)


def undo_into(undone: list[str]) -> Any:
    """A compensator that records the name of the step it undoes."""

    def undo(name: str) -> None:
        undone.append(name)

    return undo


# -- 6. savepoints in concurrent tasks compensate only their own steps -------------------------


def test_a_failing_branch_savepoint_undoes_only_its_own_steps(kit: AgentKit) -> None:
    undone: list[str] = []

    @kit.tool(name="branch.book", compensate=undo_into(undone))
    async def book(name: str) -> str:
        return name

    async def branch_a(a_may_fail: asyncio.Event) -> None:
        with pytest.raises(SagaRolledBack):
            async with kit.transaction("branch-a"):
                await book("a1")
                await a_may_fail.wait()  # B's step is made while A's savepoint is open
                raise RuntimeError("branch A fails")

    async def branch_b(a_may_fail: asyncio.Event) -> None:
        async with kit.transaction("branch-b"):
            await asyncio.sleep(0)
            await book("b1")
            a_may_fail.set()
            await asyncio.sleep(0.01)

    async def main() -> None:
        a_may_fail = asyncio.Event()
        async with kit.transaction("outer"):
            await asyncio.gather(branch_a(a_may_fail), branch_b(a_may_fail))

    asyncio.run(main())
    assert undone == ["a1"]
    (saga,) = build_history(kit.store.records()).sagas
    assert saga.status is SagaStatus.COMMITTED


def test_savepoints_in_threads_undo_only_their_own_steps(kit: AgentKit) -> None:
    undone: list[str] = []
    b_done = threading.Event()

    @kit.tool(name="thread.book", compensate=undo_into(undone))
    def book(name: str) -> str:
        return name

    with kit.transaction("outer") as saga:
        errors: list[BaseException] = []

        def branch(name: str, fail: bool) -> None:
            from agent_saga import current_saga
            from agent_saga._engine.saga import _CURRENT

            token = _CURRENT.set(saga)  # a worker thread joins the saga, as adapters do
            try:
                with kit.transaction(name):
                    book(name)
                    if fail:
                        assert b_done.wait(5)
                        raise RuntimeError(f"{name} fails")
                    b_done.set()
            except SagaRolledBack as exc:
                errors.append(exc)
            finally:
                assert current_saga() is saga
                _CURRENT.reset(token)

        threads = [
            threading.Thread(target=branch, args=("a", True)),
            threading.Thread(target=branch, args=("b", False)),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert len(errors) == 1
    assert undone == ["a"]


# -- 7. one reusable Transaction entered by two tasks or threads at once -----------------------


def test_one_transaction_object_in_two_tasks_keeps_both_sagas(kit: AgentKit) -> None:
    undone: list[str] = []

    @kit.tool(name="shared.book", compensate=undo_into(undone))
    async def book(name: str) -> str:
        return name

    shared = kit.transaction("shared")

    async def good(both_in: asyncio.Barrier, good_left: asyncio.Event) -> None:
        async with shared:
            await book("good")
            await asyncio.wait_for(both_in.wait(), 5)
        good_left.set()  # the first task leaves while the second is still inside

    async def bad(both_in: asyncio.Barrier, good_left: asyncio.Event) -> None:
        async with shared:
            await book("bad")
            await asyncio.wait_for(both_in.wait(), 5)
            await asyncio.wait_for(good_left.wait(), 5)
            raise RuntimeError("bad fails")

    async def main() -> tuple[BaseException | None, BaseException | None]:
        both_in, good_left = asyncio.Barrier(2), asyncio.Event()
        return await asyncio.gather(
            good(both_in, good_left), bad(both_in, good_left), return_exceptions=True
        )

    results = asyncio.run(main())
    assert results[0] is None
    assert isinstance(results[1], SagaRolledBack)
    assert undone == ["bad"]
    statuses = sorted(s.status.value for s in build_history(kit.store.records()).sagas)
    assert statuses == ["committed", "rolled_back"]


def test_one_transaction_object_in_two_threads_keeps_both_sagas(kit: AgentKit) -> None:
    undone: list[str] = []
    both_in = threading.Barrier(2)

    @kit.tool(name="shared.thread", compensate=undo_into(undone))
    def book(name: str) -> str:
        return name

    shared = kit.transaction("shared")
    outcomes: dict[str, object] = {}

    def run(name: str) -> None:
        try:
            with shared:
                book(name)
                both_in.wait(5)
                if name == "bad":
                    raise RuntimeError("bad fails")
            outcomes[name] = "committed"
        except BaseException as exc:
            outcomes[name] = exc

    threads = [threading.Thread(target=run, args=(n,)) for n in ("good", "bad")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes["good"] == "committed"
    assert isinstance(outcomes["bad"], SagaRolledBack)
    assert undone == ["bad"]
    statuses = sorted(s.status.value for s in build_history(kit.store.records()).sagas)
    assert statuses == ["committed", "rolled_back"]


# -- 4. the tool acts on exactly the values that were gated and logged -------------------------


def test_arguments_mutated_by_another_thread_after_the_gate_do_not_reach_the_tool(
    home: Path,
) -> None:
    gated = threading.Event()
    mutated = threading.Event()
    order = {"amount": 50}
    received: list[int] = []

    cap = MaxValue(1000, path="order.amount")

    class CapThenPause:
        """The cap, then a pause in which another thread changes the caller's dict."""

        name = "cap_then_pause"

        def evaluate(self, call: Any) -> Any:
            decision = cap.evaluate(call)
            gated.set()
            assert mutated.wait(5)
            return decision

    with AgentKit(home=home, rules=[CapThenPause()]) as kit:

        @kit.tool(name="pay.transfer", compensate=lambda order: None)
        def transfer(order: dict[str, int]) -> None:
            received.append(order["amount"])

        def attacker() -> None:
            assert gated.wait(5)
            order["amount"] = 5000
            mutated.set()

        thread = threading.Thread(target=attacker)
        thread.start()
        with kit.transaction("pay"):
            transfer(order)
        thread.join()
        (intent,) = [r for r in kit.store.records() if r.kind == "step.intent"]
    assert received == [50]
    assert intent.data["args"] == {"order": {"amount": 50}}


def test_arguments_mutated_while_an_approval_waits_do_not_reach_the_tool(home: Path) -> None:
    order = {"amount": 50}
    received: list[int] = []
    approvals = Approvals(approvers=["unix:alice"], poll=0.01)
    with AgentKit(
        home=home,
        ids=SequentialIds(),
        rules=[require_approval(when=lambda call: True, approvers=["unix:alice"])],
        approvals=approvals,
    ) as kit:

        @kit.tool(name="pay.wire", compensate=lambda order: None)
        def wire(order: dict[str, int]) -> None:
            received.append(order["amount"])

        def approver() -> None:
            deadline = time.monotonic() + 10
            requests: list[Record] = []
            while not requests and time.monotonic() < deadline:
                requests = [r for r in kit.store.records() if r.kind == "approval.requested"]
                time.sleep(0.01)
            order["amount"] = 5000  # changed after the digest was taken
            request_id = str(requests[0].data["request"])
            submit_vote(kit.store, request_id, "unix:alice", "approve", channel="test")

        thread = threading.Thread(target=approver)
        thread.start()
        with kit.transaction("pay"):
            wire(order)
        thread.join()
    assert received == [50]
