"""Fault points: where the chaos runner breaks a transaction, and how.

A fault *kind* (exception, compensation, kill, duplicate) turns what a clean run of the
transaction did (its :class:`Baseline`) into fault *points*, one per place the fault can
strike. Each point carries an :class:`Injector` (hooks between log writes, a compensator
registry, an action after the transaction) and says whether it runs in this process or in a
child process that is killed. Kinds are looked up by name in :data:`FAULT_KINDS`;
:func:`register_fault_kind` adds one.
"""

from __future__ import annotations

import functools
import os
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from ._registry import LayeredRegistry
from ._words import step_name

if TYPE_CHECKING:
    from agent_saga import AgentKit, CompensatorRegistry, Entry, Record, StepView

    from ._intercept import InterceptingStore

Mode = Literal["process", "child"]


class InjectedFault(Exception):
    """The exception the chaos runner raises at a fault point (never a bug of its own)."""


@dataclass(frozen=True)
class Write:
    """One log write of a run, described by its last record."""

    number: int
    kind: str
    ordinal: int | None
    tool: str | None

    def words(self) -> str:
        if self.ordinal is None or self.tool is None:
            return f"log write {self.number} ({self.kind})"
        return f"log write {self.number} ({self.kind} of {step_name(self.ordinal, self.tool)})"


@dataclass(frozen=True)
class Baseline:
    """What a clean run, and a run that fails after its last step, did."""

    steps: tuple[StepView, ...]
    writes: tuple[Write, ...]
    """The clean run's writes (it commits)."""
    rollback_writes: tuple[Write, ...]
    """The failing run's writes after the last one it shares with the clean run's prefix."""
    failing_prefix: int
    """How many writes the failing run made before its rollback began."""
    approved: tuple[int, ...] = ()
    """Ordinals of the clean run's steps that waited for an approval."""

    @property
    def last_ordinal(self) -> int | None:
        """The last step that took effect: a failure after it makes every step roll back."""
        done = [s.ordinal for s in self.steps if s.outcome.value == "done"]
        return done[-1] if done else None


class Injector:
    """What one fault point does to one run; every hook defaults to doing nothing."""

    withhold_approval: int | None = None
    """The step whose approval the runner's approver does not give (it expires)."""

    def before_write(self, number: int, entries: Sequence[Entry]) -> None:
        return None

    def after_write(self, number: int, records: list[Record]) -> None:
        return None

    def registry(self, base: CompensatorRegistry, store: InterceptingStore) -> CompensatorRegistry:
        return base

    def after_transaction(self, kit: AgentKit, records: list[Record]) -> list[str]:
        """Runs once the transaction has ended; returns notes for the report."""
        return []


@dataclass(frozen=True)
class Expect:
    """What a point's run should show, for the invariants that depend on the fault."""

    failed_compensation: int | None = None
    """The ordinal whose compensation is made to fail (the saga must need a human)."""
    compare_upto: int | None = None
    """Steps up to this ordinal must match the clean run (``None``: every step it ran)."""
    refused: int | None = None
    """The ordinal that must be refused (its approval expired), its effect never run."""


@dataclass(frozen=True)
class FaultPoint:
    kind: str
    label: str
    """The point in plain words, as the report names it."""
    injector: Injector
    mode: Mode = "process"
    expect: Expect = field(default_factory=Expect)


class FaultKind(Protocol):
    name: str
    description: str

    def points(self, baseline: Baseline) -> tuple[list[FaultPoint], list[tuple[str, str]]]:
        """The points of this kind, and ``(point, reason)`` for those it cannot exercise."""
        ...


# -- injectors ------------------------------------------------------------------------------


def _has(items: Sequence[Entry] | Sequence[Record], kind: str, ordinal: int) -> bool:
    return any(item.kind == kind and item.data.get("ordinal") == ordinal for item in items)


class RaiseAtStep(Injector):
    """Raise :class:`InjectedFault` before a step's intent is written, or after its outcome."""

    def __init__(self, ordinal: int, *, before: bool) -> None:
        self.ordinal = ordinal
        self.before = before
        self.fired = False

    def _fire(self) -> None:
        if not self.fired:
            self.fired = True
            where = "before" if self.before else "after"
            raise InjectedFault(
                f"agent-saga chaos: injected exception {where} step #{self.ordinal}"
            )

    def before_write(self, number: int, entries: Sequence[Entry]) -> None:
        if self.before and _has(entries, "step.intent", self.ordinal):
            self._fire()

    def after_write(self, number: int, records: list[Record]) -> None:
        if not self.before and _has(records, "step.done", self.ordinal):
            self._fire()


class FailCompensation(RaiseAtStep):
    """Fail after the last step, and make one step's named compensation raise."""

    def __init__(self, ordinal: int, last: int) -> None:
        super().__init__(last, before=False)
        self.target = ordinal

    def registry(self, base: CompensatorRegistry, store: InterceptingStore) -> CompensatorRegistry:
        return FailingRegistry(base, store, self.target)


class KillAtWrite(RaiseAtStep):
    """SIGKILL this process right before or right after log write ``write``.

    With ``fail_after``, the transaction is also made to fail after that step, so the kill can
    land in its rollback.
    """

    def __init__(self, write: int, *, before: bool, fail_after: int | None) -> None:
        super().__init__(fail_after or 0, before=False)
        self.write = write
        self.kill_before = before
        self.fail = fail_after is not None

    def before_write(self, number: int, entries: Sequence[Entry]) -> None:
        if self.kill_before and number == self.write:
            os.kill(os.getpid(), signal.SIGKILL)

    def after_write(self, number: int, records: list[Record]) -> None:
        if not self.kill_before and number == self.write:
            os.kill(os.getpid(), signal.SIGKILL)
        if self.fail:
            super().after_write(number, records)


class WithholdApproval(Injector):
    """The runner's approver gives no vote for one step: its approval request expires."""

    def __init__(self, ordinal: int) -> None:
        self.withhold_approval = ordinal


class Redeliver(Injector):
    """Deliver one committed step a second time, with the same arguments and key."""

    def __init__(self, ordinal: int, tool: str) -> None:
        self.ordinal = ordinal
        self.tool = tool

    def after_transaction(self, kit: AgentKit, records: list[Record]) -> list[str]:
        from ._redeliver import redeliver

        return redeliver(kit, records, self.ordinal, self.tool)


# -- kinds ----------------------------------------------------------------------------------


class ExceptionKind:
    name = "exception"
    description = "an exception at each step, before and after its effect"

    def points(self, baseline: Baseline) -> tuple[list[FaultPoint], list[tuple[str, str]]]:
        points = []
        for step in baseline.steps:
            name = step_name(step.ordinal, step.tool)
            points.append(
                FaultPoint(
                    self.name,
                    f"an exception at {name}, before its effect",
                    RaiseAtStep(step.ordinal, before=True),
                    expect=Expect(compare_upto=step.ordinal - 1),
                )
            )
            points.append(
                FaultPoint(
                    self.name,
                    f"an exception at {name}, after its effect (the result never arrives)",
                    RaiseAtStep(step.ordinal, before=False),
                    expect=Expect(compare_upto=step.ordinal),
                )
            )
        return points, []


class CompensationKind:
    name = "compensation"
    description = "a failing compensation at each step, during a rollback of every step"

    def points(self, baseline: Baseline) -> tuple[list[FaultPoint], list[tuple[str, str]]]:
        last = baseline.last_ordinal
        points: list[FaultPoint] = []
        skipped: list[tuple[str, str]] = []
        for step in baseline.steps:
            if step.compensation is None or last is None or step.ordinal > last:
                continue
            label = f"a failing compensation at {step_name(step.ordinal, step.tool)}"
            if step.compensation_recoverable is False:
                skipped.append((label, "its compensation is an in-process callable"))
                continue
            points.append(
                FaultPoint(
                    self.name,
                    label,
                    FailCompensation(step.ordinal, last),
                    expect=Expect(failed_compensation=step.ordinal, compare_upto=last),
                )
            )
        return points, skipped


class KillKind:
    name = "kill"
    description = "SIGKILL of a child process around each log write, then recovery"

    def points(self, baseline: Baseline) -> tuple[list[FaultPoint], list[tuple[str, str]]]:
        if not hasattr(os, "fork"):
            return [], [("SIGKILL of a child process", "this platform cannot fork")]
        points: list[FaultPoint] = []
        phases: list[tuple[tuple[Write, ...], int | None, str]] = [
            (baseline.writes, None, ""),
            (baseline.rollback_writes, baseline.last_ordinal, ", in the rollback"),
        ]
        for writes, fail_after, phase in phases:
            for write in writes:
                if write.kind in (
                    "step.done",
                    "step.failed",
                    "compensation.done",
                    "compensation.failed",
                ):
                    label = f"SIGKILL right before {write.words()}{phase}, then recovery"
                    points.append(self._point(label, write.number, True, fail_after))
                label = f"SIGKILL right after {write.words()}{phase}, then recovery"
                points.append(self._point(label, write.number, False, fail_after))
        return points, []

    def _point(self, label: str, write: int, before: bool, fail: int | None) -> FaultPoint:
        injector = KillAtWrite(write, before=before, fail_after=fail)
        return FaultPoint(self.name, label, injector, "child")


class DuplicateKind:
    name = "duplicate"
    description = "each committed step delivered a second time with the same idempotency key"

    def points(self, baseline: Baseline) -> tuple[list[FaultPoint], list[tuple[str, str]]]:
        everything = Expect(compare_upto=baseline.steps[-1].ordinal if baseline.steps else None)
        points = [
            FaultPoint(
                self.name,
                f"a duplicate delivery of {step_name(step.ordinal, step.tool)}",
                Redeliver(step.ordinal, step.tool),
                expect=everything,
            )
            for step in baseline.steps
            if step.outcome.value == "done"
        ]
        return points, []


class ApprovalExpiryKind:
    name = "approval"
    description = "an approval that expires, at each step that waits for one"

    def points(self, baseline: Baseline) -> tuple[list[FaultPoint], list[tuple[str, str]]]:
        tools = {s.ordinal: s.tool for s in baseline.steps}
        points = [
            FaultPoint(
                self.name,
                f"an approval that expires at {step_name(ordinal, tools.get(ordinal, '?'))}",
                WithholdApproval(ordinal),
                expect=Expect(compare_upto=ordinal - 1, refused=ordinal),
            )
            for ordinal in baseline.approved
        ]
        return points, []


FAULT_KINDS: dict[str, FaultKind] = {
    kind.name: kind
    for kind in (
        ExceptionKind(),
        CompensationKind(),
        KillKind(),
        DuplicateKind(),
        ApprovalExpiryKind(),
    )
}
"""The fault kinds the runner knows, by name, in the order it runs them."""


def register_fault_kind(kind: FaultKind) -> None:
    """Add a fault kind (or replace the one with the same name)."""
    if not kind.name or not kind.name.isidentifier():
        raise ValueError(f"a fault kind needs an identifier name, got {kind.name!r}")
    FAULT_KINDS[kind.name] = kind


def failing(func: Callable[..., Any], should_fail: Callable[[], bool]) -> Callable[..., Any]:
    """``func``, except that it raises :class:`InjectedFault` when ``should_fail()``."""

    @functools.wraps(func)
    def compensate(*args: Any, **kwargs: Any) -> Any:
        if should_fail():
            raise InjectedFault("agent-saga chaos: injected compensation failure")
        return func(*args, **kwargs)

    return compensate


class FailingRegistry(LayeredRegistry):
    """``parent``'s compensators, except that step ``ordinal``'s compensation raises.

    The engine logs a compensation's intent right before calling it, so the compensator can
    tell which step it is undoing from the store's last record.
    """

    def __init__(self, parent: CompensatorRegistry, store: InterceptingStore, ordinal: int) -> None:
        super().__init__(parent)
        self.store = store
        self.ordinal = ordinal

    def _targeted(self) -> bool:
        last = self.store.last
        return (
            last is not None
            and last.kind == "compensation.intent"
            and last.data.get("ordinal") == self.ordinal
        )

    def get(self, name: str) -> Callable[..., Any] | None:
        func = super().get(name)
        return None if func is None else failing(func, self._targeted)
