"""The chaos runner: a transaction run once per fault point, its invariants checked each time.

A run first executes the transaction cleanly (it must commit), then once more failing after
its last step, and records what both wrote. Those two runs are the baseline from which each
fault kind derives its points. Every point then runs on a fresh log:

* in-process points (exceptions, failing compensations, duplicate deliveries) on an in-memory
  log whose every record is its own write;
* kill points in a forked child on a real file log in a fresh home: the child is killed with
  SIGKILL at the chosen write, then this process recovers the home with ``kit.recover()``.

Effects a killed child made are only visible here when they outlive it: record them in the
``saga_ledger`` fixture (a journal file) or another store outside the process.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_saga import (
    AgentKit,
    Approvals,
    FileLogStore,
    MemoryKillSwitch,
    MemoryLogStore,
    SequentialIds,
    use_kit,
)

from ._approving import runner_approvals
from ._faults import FAULT_KINDS, Baseline, FaultPoint, Injector, RaiseAtStep, Write
from ._intercept import InterceptingStore
from ._invariants import EXERCISED, RunOutcome, Violation, check
from ._registry import ACTIVE
from ._report import ChaosReport, PointResult

if TYPE_CHECKING:
    from agent_saga import CompensatorRegistry, Record

    from ._ledger import JournalLedger

CHILD_TIMEOUT = 60.0
CHILD_FAILED = 70


Transaction = Callable[[], Any]


class ChaosRunner:
    """Runs transactions under every fault point of the selected kinds.

    Args:
        root: a directory for the runs' homes (each run gets its own).
        registry: where the transaction's compensators and probes are found.
        kinds: names of the fault kinds to run (see :data:`FAULT_KINDS`).
        ledger: a witness of effects, read to check exactly-once and uncompensated effects.
        kit: the kit the transaction's tools were declared on (default: the test's
            ``saga_kit``): every run's kit shares its tool registry, since a tool declared on a
            kit runs only in kits that share it.
    """

    def __init__(
        self,
        root: Path,
        registry: CompensatorRegistry,
        kinds: Sequence[str],
        ledger: JournalLedger | None = None,
        *,
        kit: AgentKit | None = None,
    ) -> None:
        unknown = [k for k in kinds if k not in FAULT_KINDS]
        if unknown:
            known = ", ".join(FAULT_KINDS)
            raise ValueError(f"unknown fault kind(s) {', '.join(unknown)}; known: {known}")
        self.root = root
        self.registry = registry
        owner = kit if kit is not None else ACTIVE.get()
        self.tools = owner.runtime.tools if owner is not None else None
        self.kinds = tuple(kinds)
        self.ledger = ledger
        self._runs = 0
        self._reset: Callable[[], object] | None = None

    def run(
        self,
        transaction: Transaction,
        *,
        world: Callable[[], object] | None = None,
        reset: Callable[[], object] | None = None,
        name: str | None = None,
        fail: bool = True,
    ) -> ChaosReport:
        """Run ``transaction`` once per fault point; fail the test if an invariant broke.

        Args:
            transaction: calls your tools; the runner opens the transaction around it (a
                coroutine function is run with ``asyncio.run``).
            world: returns a comparable snapshot of the external state your tools change; after
                a rollback it must equal the snapshot taken before the run, and after a
                committed run the snapshot after a clean run.
            reset: called before every run, to put the world back in its initial state.
            name: the transaction's name in the log.
            fail: raise ``AssertionError`` with :meth:`ChaosReport.summary` on any violation.
        """
        __tracebackhide__ = True
        name = name or str(getattr(transaction, "__name__", "transaction"))
        report = ChaosReport(name)
        self._reset = reset
        clean = self._run(transaction, name, Injector(), world)
        if clean.error is not None or {v.status.value for v in clean.sagas} != {"committed"}:
            raise AssertionError(
                f"agent-saga chaos: transaction {name!r} does not commit when no fault is "
                f"injected: {clean.error!r}"
            ) from clean.error
        if not any(view.steps for view in clean.sagas):
            raise AssertionError(
                f"agent-saga chaos: transaction {name!r} ran no tool call inside the runner's "
                "transaction, so no fault point could be tested. Call your tools from it "
                "directly (the runner opens the transaction) or through saga_scope; a "
                "transaction of a kit of your own runs outside the runner's log."
            )
        baseline = self._baseline(transaction, name, clean)
        clean_world = clean.world
        for kind_name in self.kinds:
            points, skipped = FAULT_KINDS[kind_name].points(baseline)
            report.skipped += skipped
            for point in points:
                outcome = self._point(transaction, name, point, world)
                violations = check(outcome, point.expect, baseline, clean_world)
                report.results.append(
                    PointResult(
                        point.kind, point.label, outcome.status(), violations, outcome.notes
                    )
                )
        if fail and not report.ok:
            raise AssertionError(report.summary())
        return report

    # -- the baseline --------------------------------------------------------------------------

    def _baseline(self, transaction: Transaction, name: str, clean: RunOutcome) -> Baseline:
        steps = tuple(s for view in clean.sagas for s in view.steps)
        writes = _writes(clean.records)
        last = Baseline(steps, writes, (), len(writes)).last_ordinal
        if last is None:
            return Baseline(steps, writes, (), len(writes), _approved(clean.records))
        failing = self._run(transaction, name, RaiseAtStep(last, before=False), None)
        all_writes = _writes(failing.records)
        begin = next(
            (w.number for w in all_writes if w.kind == "rollback.begin"), len(all_writes) + 1
        )
        rollback = tuple(w for w in all_writes if w.number >= begin)
        return Baseline(steps, writes, rollback, begin - 1, _approved(clean.records))

    # -- running one point ---------------------------------------------------------------------

    def _point(
        self,
        transaction: Transaction,
        name: str,
        point: FaultPoint,
        world: Callable[[], object] | None,
    ) -> RunOutcome:
        if point.mode == "child":
            return self._run_child(transaction, name, point.injector, world)
        return self._run(transaction, name, point.injector, world)

    def _next_id(self) -> tuple[int, str]:
        self._runs += 1
        return self._runs, f"chaos{self._runs:03d}"

    def _snapshot(self, world: Callable[[], object] | None) -> tuple[object, int]:
        if self._reset is not None:
            self._reset()
        before = world() if world is not None else None
        count = len(self.ledger.events()) if self.ledger is not None else 0
        return before, count

    def _finish(
        self,
        outcome: RunOutcome,
        world: Callable[[], object] | None,
        before: object,
        ledger_count: int,
    ) -> RunOutcome:
        if world is not None:
            outcome.world = (before, world())
        if self.ledger is not None:
            outcome.ledger = self.ledger.events()[ledger_count:]
        return outcome

    def _run(
        self,
        transaction: Transaction,
        name: str,
        injector: Injector,
        world: Callable[[], object] | None,
    ) -> RunOutcome:
        number, prefix = self._next_id()
        before, ledger_count = self._snapshot(world)
        store = InterceptingStore(
            MemoryLogStore(), before=injector.before_write, after=injector.after_write
        )
        kit = AgentKit(
            home=self.root / f"run{number:03d}",
            store=store,
            kill_switch=MemoryKillSwitch(),
            registry=injector.registry(self.registry, store),
            tools=self.tools,
            ids=SequentialIds(prefix),
            fast_path=False,
            approvals=runner_approvals(store, injector.withhold_approval),
        )
        with kit:
            error = execute(kit, transaction, name)
            records = list(store.records())
            notes = injector.after_transaction(kit, records)
            outcome = RunOutcome(list(store.records()), kit.verify(), error, notes=notes)
        return self._finish(outcome, world, before, ledger_count)

    def _run_child(
        self,
        transaction: Transaction,
        name: str,
        injector: Injector,
        world: Callable[[], object] | None,
    ) -> RunOutcome:
        number, prefix = self._next_id()
        home = self.root / f"run{number:03d}"
        before, ledger_count = self._snapshot(world)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child never returns into pytest
            code = 0
            try:
                store = InterceptingStore(
                    FileLogStore(home), before=injector.before_write, after=injector.after_write
                )
                kit = AgentKit(
                    home=home,
                    store=store,
                    kill_switch=MemoryKillSwitch(),
                    registry=self.registry,
                    tools=self.tools,
                    ids=SequentialIds(prefix),
                    fast_path=False,
                    checkpoints=False,  # a throwaway log: no background thread to kill too
                    approvals=runner_approvals(store, injector.withhold_approval),
                )
                execute(kit, transaction, name)
                kit.close()
            except BaseException:
                traceback.print_exc()
                code = CHILD_FAILED
            finally:
                os._exit(code)
        problems = _reap(pid)
        recovering = AgentKit(
            home=home,
            store=FileLogStore(home),
            kill_switch=MemoryKillSwitch(),
            registry=self.registry,
            tools=self.tools,
            checkpoints=False,
            approvals=no_approvals(),
        )
        with recovering as kit:
            recovery = kit.recover()
            outcome = RunOutcome(
                list(kit.store.records()), kit.verify(), recovery=recovery, problems=problems
            )
        return self._finish(outcome, world, before, ledger_count)


def no_approvals() -> Approvals:
    """No approver: a call that needs an approval is refused at once, even when the project's
    configuration lists approvers (a recovering kit runs no gated call)."""
    return Approvals()


def execute(kit: AgentKit, transaction: Transaction, name: str) -> BaseException | None:
    """Run ``transaction`` inside a transaction of ``kit``; returns what it raised, if anything.

    ``saga_scope`` and ``default_kit()`` inside the transaction use ``kit`` too.
    """
    with use_kit(kit):
        try:
            with kit.transaction(name):
                if inspect.iscoroutinefunction(transaction):
                    asyncio.run(transaction())
                else:
                    transaction()
        except Exception as exc:
            return exc
    return None


def _reap(pid: int) -> list[Violation]:
    deadline = time.monotonic() + CHILD_TIMEOUT
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return [Violation(EXERCISED, f"the child ran for over {CHILD_TIMEOUT:.0f} s")]
        time.sleep(0.002)
    code = os.waitstatus_to_exitcode(status)
    if code == -signal.SIGKILL:
        return []
    if code == 0:
        return [
            Violation(
                EXERCISED,
                "the transaction finished before the chosen log write: it wrote fewer "
                "records than in the clean run (is it deterministic?)",
            )
        ]
    return [Violation(EXERCISED, f"the child process failed (exit {code}); see its stderr")]


def _approved(records: list[Record]) -> tuple[int, ...]:
    """Ordinals of the steps that asked for an approval."""
    return tuple(
        ordinal
        for r in records
        if r.kind == "approval.requested" and isinstance(ordinal := r.data.get("ordinal"), int)
    )


def _writes(records: list[Record]) -> tuple[Write, ...]:
    """The writes of a run whose every record was its own write (``fast_path=False``)."""
    out = []
    for number, record in enumerate(records, start=1):
        ordinal = record.data.get("ordinal")
        tool = record.data.get("tool")
        out.append(
            Write(
                number,
                record.kind,
                ordinal if isinstance(ordinal, int) else None,
                tool if isinstance(tool, str) else None,
            )
        )
    return tuple(out)
