"""Replay determinism: a transaction re-run against its recorded log must call the same steps.

A saga's steps are identified by ``(saga_id, ordinal, tool)`` and its idempotency keys derive
from them, so recovery and replay are only sound when the same code makes the same calls in the
same order. The replay re-runs the transaction on a fresh log and compares every step with the
recorded step of the same ordinal *as it is about to be logged*, before its effect runs: the
first difference stops the replay (the steps that already ran are compensated) and fails the
assertion, naming that step, the recorded call and the replayed one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_saga import (
    AgentKit,
    MemoryKillSwitch,
    MemoryLogStore,
    SequentialIds,
    StepView,
    build_history,
    find_saga,
)

from ._approving import runner_approvals
from ._assertions import LogSource, records_of
from ._chaos import execute
from ._intercept import InterceptingStore
from ._invariants import divergence
from ._registry import ACTIVE
from ._words import call_text

if TYPE_CHECKING:
    from agent_saga import CompensatorRegistry, Entry

STEP_KINDS = ("step.intent", "gate.refused")


class ReplayDivergence(AssertionError):
    """The replayed transaction called a different step than the recorded one."""


class _Checker:
    """Compares each step the replay is about to log with the recorded step."""

    def __init__(self, recorded: Sequence[StepView], compare_args: bool) -> None:
        self.recorded = {step.ordinal: step for step in recorded}
        self.compare_args = compare_args
        self.divergence: tuple[int, str] | None = None
        """The first differing step's ordinal, and how it differs."""
        self.seen: list[int] = []

    def before_write(self, number: int, entries: Sequence[Entry]) -> None:
        for entry in entries:
            ordinal = entry.data.get("ordinal")
            if entry.kind not in STEP_KINDS or not isinstance(ordinal, int) or entry.saga is None:
                continue
            tool, args = str(entry.data.get("tool")), entry.data.get("args")
            self.seen.append(ordinal)
            expected = self.recorded.get(ordinal)
            if expected is None:
                problem = (
                    f"step #{ordinal} {call_text(tool, args)} ran in the replay; the recorded "
                    "run has no such step"
                )
            elif expected.tool != tool or (self.compare_args and expected.args != args):
                here = StepView(ordinal, tool, expected.outcome, args=args)
                problem = divergence(expected, here)
            else:
                continue
            if self.divergence is None:
                self.divergence = (ordinal, problem)
            raise ReplayDivergence(f"replay diverged at step #{ordinal}: {problem}")


def recorded_steps(log: LogSource, saga: str | None = None) -> tuple[StepView, ...]:
    """The steps of ``saga`` (default: the last saga) in ``log``."""
    views = build_history(records_of(log)).sagas
    if not views:
        raise AssertionError("the recorded log holds no saga to replay")
    view = find_saga(views, saga) if saga is not None else views[-1]
    return view.steps


def assert_replay_deterministic(
    transaction: Callable[[], Any],
    *,
    recorded: LogSource | None = None,
    saga: str | None = None,
    runs: int = 2,
    compare_args: bool = True,
    registry: CompensatorRegistry | None = None,
    name: str | None = None,
) -> tuple[StepView, ...]:
    """Assert that re-running ``transaction`` calls the recorded steps, in order.

    Args:
        transaction: calls your tools; it runs inside a fresh transaction on an in-memory log.
        recorded: the log of an earlier run (a kit, store, path or records). Without it, the
            transaction is run once first and that run is the record.
        saga: which saga of ``recorded`` (id or prefix; default: the last one).
        runs: how many replays must each match the record.
        compare_args: also compare each step's logged arguments, not only the tool.
        registry: where compensators are found by name (default: the ``saga_kit``'s when the
            test uses it, else the process-wide registry).

    Returns:
        The recorded steps.
    """
    __tracebackhide__ = True
    if runs < 1:
        raise ValueError("runs must be at least 1")
    name = name or str(getattr(transaction, "__name__", "transaction"))
    if recorded is None:
        steps, _ = _run(transaction, name, None, registry)
    else:
        steps = recorded_steps(recorded, saga)
    if not steps:
        raise AssertionError(
            f"the recorded run of transaction {name!r} made no tool call, so there is nothing "
            "to replay (tools called through a kit of your own run outside the replay's log)"
        )
    for number in range(1, runs + 1):
        replayed, checker = _run(transaction, name, _Checker(steps, compare_args), registry)
        where = f"replay {number} of transaction {name!r}"
        if checker is not None and checker.divergence is not None:
            ordinal, problem = checker.divergence
            raise AssertionError(
                f"{where} diverged from the recorded run at step #{ordinal}: {problem}"
            )
        if len(replayed) < len(steps):
            missing = steps[len(replayed)]
            raise AssertionError(
                f"{where} diverged from the recorded run at step #{missing.ordinal}: the replay "
                f"ended after {len(replayed)} step(s) and never called "
                f"{call_text(missing.tool, missing.args)}"
            )
    return steps


def _run(
    transaction: Callable[[], Any],
    name: str,
    checker: _Checker | None,
    registry: CompensatorRegistry | None,
) -> tuple[tuple[StepView, ...], _Checker | None]:
    store = InterceptingStore(
        MemoryLogStore(), before=checker.before_write if checker is not None else None
    )
    active = ACTIVE.get()
    kit = AgentKit(
        home=Path("."),
        store=store,
        kill_switch=MemoryKillSwitch(),
        registry=registry or (active.runtime.registry if active is not None else None),
        tools=active.runtime.tools if active is not None else None,
        ids=SequentialIds("replay"),
        fast_path=False,
        approvals=runner_approvals(store),
    )
    with kit:
        execute(kit, transaction, name)
        views = build_history(store.records()).sagas
    return tuple(s for view in views for s in view.steps), checker
