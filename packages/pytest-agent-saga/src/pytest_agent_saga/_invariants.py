"""The invariants checked after every fault point, each stated in plain words.

Every check reads what the run left behind: the log (its records and whether it verifies),
the recovery report when a child was killed, the ledger's events of this run, and the user's
own ``world`` snapshot before and after. None of them trusts the engine's own report of what
it did.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agent_saga import CompensationState, SagaStatus, StepOutcome, build_history

from ._words import call_text, step_name

if TYPE_CHECKING:
    from agent_saga import Record, RecoveryReport, SagaView, StepView, VerifyReport

    from ._faults import Baseline, Expect
    from ._ledger import LedgerEvent

VERIFIES = "the log verifies"
SETTLED = "every saga ends (committed, rolled back, or handed to a human)"
COMPENSATED = "every committed effect is compensated after a rollback"
ORDER = "compensations run in reverse order of the steps"
ONCE = "each idempotency key takes effect at most once"
WORLD = "the world after a rollback is as it was before the transaction"
CLEAN = "the world after a committed run is as after a clean run"
HUMAN = "recovery settles the saga without a human"
REPORTED = "a failed compensation leaves the saga needing a human"
DETERMINISTIC = "the transaction calls the same steps as in the clean run"
EXERCISED = "the fault point is reached"
EXPIRED = "a step whose approval expired does not run"


@dataclass(frozen=True)
class Violation:
    invariant: str
    detail: str


@dataclass
class RunOutcome:
    """What one run (a clean one or one fault point) left behind."""

    records: list[Record]
    verified: VerifyReport
    error: BaseException | None = None
    recovery: RecoveryReport | None = None
    ledger: list[LedgerEvent] | None = None
    world: tuple[object, object] | None = None
    """``(before, after)`` snapshots of the user's world, when a ``world`` was given."""
    notes: list[str] = field(default_factory=list)
    problems: list[Violation] = field(default_factory=list)
    """Found while running (a child that failed, a point never reached)."""

    @property
    def sagas(self) -> tuple[SagaView, ...]:
        return build_history(self.records).sagas

    def status(self) -> str:
        views = self.sagas
        if not views:
            return "no saga"
        return ", ".join(view.status.value for view in views)


def check(
    outcome: RunOutcome,
    expect: Expect,
    baseline: Baseline,
    clean: tuple[object, object] | None,
) -> list[Violation]:
    """Every invariant broken by ``outcome``, in a stable order."""
    views = outcome.sagas
    found = list(outcome.problems)
    if not outcome.verified.ok:
        found.append(Violation(VERIFIES, str(outcome.verified.error)))
    escalated = _escalated(outcome.recovery)
    found += [Violation(HUMAN, detail) for detail in escalated.values()]
    for view in views:
        if view.status is SagaStatus.RUNNING:
            found.append(Violation(SETTLED, f"saga {view.id} has no end record"))
        found += _compensated(view, outcome, expect, set(escalated))
        found += _order(view, outcome.records)
        found += _reported(view, expect)
        found += _expired(view, expect)
    found += _once(views, outcome)
    found += _world(views, outcome, clean)
    found += _deterministic(views, baseline, expect)
    return found


def _escalated(report: RecoveryReport | None) -> dict[tuple[str, int], str]:
    if report is None:
        return {}
    return {
        (saga.saga_id, step.ordinal): f"{step_name(step.ordinal, step.tool)}: {step.detail}"
        for saga in report.recovered
        for step in saga.steps
        if step.action in ("escalated", "failed")
    }


def _recovery_action(report: RecoveryReport | None, saga: str, ordinal: int) -> str | None:
    for recovered in report.recovered if report else ():
        if recovered.saga_id == saga:
            for step in recovered.steps:
                if step.ordinal == ordinal:
                    return step.action
    return None


def _effects(outcome: RunOutcome, key: str | None) -> list[str]:
    if key is None or outcome.ledger is None:
        return []
    return [event.action for event in outcome.ledger if event.key == key]


def _compensated(
    view: SagaView, outcome: RunOutcome, expect: Expect, escalated: set[tuple[str, int]]
) -> list[Violation]:
    if view.status is SagaStatus.COMMITTED:
        return []
    found = []
    for step in view.steps:
        if step.ordinal == expect.failed_compensation or (view.id, step.ordinal) in escalated:
            continue
        name = step_name(step.ordinal, step.tool)
        action = _recovery_action(outcome.recovery, view.id, step.ordinal)
        state = step.compensation_state
        if step.outcome is StepOutcome.UNKNOWN:
            if step.idempotency_key is None:
                continue  # no intent was logged (only, say, its approval): its effect never ran
            if action in ("not landed", "compensated") or state is CompensationState.COMPENSATED:
                continue
            if action != "local":
                found.append(Violation(COMPENSATED, f"{name}: its outcome was never settled"))
                continue
        elif step.outcome is not StepOutcome.DONE or state is CompensationState.COMPENSATED:
            continue
        if state is CompensationState.NOT_NEEDED or action == "local":
            effects = _effects(outcome, step.idempotency_key)
            if effects:
                found.append(
                    Violation(
                        COMPENSATED,
                        f"{name} took effect (ledger: {', '.join(effects)}) and nothing undid "
                        f"it: it declares no compensation ({step.semantics or '?'})",
                    )
                )
        elif state is CompensationState.NONE_DECLARED:
            found.append(Violation(COMPENSATED, f"{name} committed and declares no compensation"))
        elif state is CompensationState.PENDING:
            found.append(Violation(COMPENSATED, f"{name} committed and was never compensated"))
        elif state is CompensationState.STARTED:
            found.append(Violation(COMPENSATED, f"{name}: its compensation never finished"))
        elif state is CompensationState.FAILED:
            found.append(
                Violation(
                    COMPENSATED, f"{name}: its compensation failed: {step.compensation_error}"
                )
            )
    return found


def _order(view: SagaView, records: list[Record]) -> list[Violation]:
    found = []
    previous: int | None = None
    for record in records:
        if record.saga != view.id:
            continue
        if record.kind in ("rollback.begin", "recovery.begin"):
            previous = None
        elif record.kind == "compensation.intent":
            ordinal = record.data.get("ordinal")
            if not isinstance(ordinal, int):
                continue
            if previous is not None and ordinal > previous:
                tools = {s.ordinal: s.tool for s in view.steps}
                found.append(
                    Violation(
                        ORDER,
                        f"the compensation of {step_name(ordinal, tools.get(ordinal, '?'))} ran "
                        f"after that of {step_name(previous, tools.get(previous, '?'))}",
                    )
                )
            previous = ordinal
    return found


def _reported(view: SagaView, expect: Expect) -> list[Violation]:
    target = expect.failed_compensation
    if target is None:
        return []
    steps = {s.ordinal: s for s in view.steps}
    step = steps.get(target)
    if step is None:
        return [
            Violation(REPORTED, f"step #{target} did not run, so its compensation could not fail")
        ]
    name = step_name(step.ordinal, step.tool)
    if view.status is SagaStatus.COMMITTED:
        detail = "the transaction caught the injected exception and committed: nothing rolled back"
        return [Violation(REPORTED, f"{name}'s compensation never ran: {detail}")]
    if step.compensation_state is not CompensationState.FAILED:
        return [Violation(REPORTED, f"the failure of {name}'s compensation was not logged")]
    if view.status is not SagaStatus.NEEDS_HUMAN:
        return [
            Violation(REPORTED, f"{name}'s compensation failed and the saga ended {view.status}")
        ]
    return []


def _expired(view: SagaView, expect: Expect) -> list[Violation]:
    if expect.refused is None:
        return []
    step = next((s for s in view.steps if s.ordinal == expect.refused), None)
    if step is None:
        return [Violation(EXPIRED, f"step #{expect.refused} was never reached")]
    if step.outcome is not StepOutcome.REFUSED:
        name = step_name(step.ordinal, step.tool)
        return [Violation(EXPIRED, f"{name} ended {step.outcome.value}, not refused")]
    return []


def _who(views: tuple[SagaView, ...], key: str) -> str:
    for view in views:
        for step in view.steps:
            if step.idempotency_key == key:
                return step_name(step.ordinal, step.tool)
            if step.idempotency_key and key == f"{step.idempotency_key}/compensate":
                return f"the compensation of {step_name(step.ordinal, step.tool)}"
    return f"key {key}"


def _once(views: tuple[SagaView, ...], outcome: RunOutcome) -> list[Violation]:
    found = []
    if outcome.ledger is not None:
        counts = Counter((e.action, e.key) for e in outcome.ledger if e.key)
        for (action, key), n in sorted(counts.items()):
            if n > 1:
                found.append(
                    Violation(
                        ONCE,
                        f"{_who(views, key)} took effect {n} times (ledger: {action!r}, key {key})",
                    )
                )
    done = Counter(
        (r.saga, r.data.get("ordinal")) for r in outcome.records if r.kind == "compensation.done"
    )
    for view in views:
        for step in view.steps:
            n = done[(view.id, step.ordinal)]
            if n > 1:
                name = step_name(step.ordinal, step.tool)
                found.append(Violation(ONCE, f"the log records {name} compensated {n} times"))
    return found


def _uncompensated(views: tuple[SagaView, ...]) -> list[str]:
    return [
        step_name(s.ordinal, s.tool)
        + (" (declares no compensation)" if s.compensation is None else "")
        for view in views
        for s in view.steps
        if s.outcome is StepOutcome.DONE
        and s.compensation_state is not CompensationState.COMPENSATED
    ]


def _world(
    views: tuple[SagaView, ...], outcome: RunOutcome, clean: tuple[object, object] | None
) -> list[Violation]:
    if outcome.world is None or not views:
        return []
    before, after = outcome.world
    statuses = {view.status for view in views}
    if statuses == {SagaStatus.ROLLED_BACK} and after != before:
        left = _uncompensated(views)
        suspects = f"; not compensated: {', '.join(left)}" if left else ""
        return [Violation(WORLD, f"before: {before!r}; after: {after!r}{suspects}")]
    committed = statuses == {SagaStatus.COMMITTED}
    if committed and clean is not None and before == clean[0] and after != clean[1]:
        return [Violation(CLEAN, f"after a clean run: {clean[1]!r}; after this run: {after!r}")]
    return []


def _deterministic(
    views: tuple[SagaView, ...], baseline: Baseline, expect: Expect
) -> list[Violation]:
    # A step known only from its approval records never logged its call: nothing to compare.
    ran = {
        s.ordinal: s
        for view in views
        for s in view.steps
        if s.idempotency_key is not None or s.outcome is StepOutcome.REFUSED
    }
    upto = expect.compare_upto
    wanted = [s for s in baseline.steps if upto is None or s.ordinal <= upto]
    for expected in wanted:
        step = ran.get(expected.ordinal)
        if step is None:
            if upto is None:
                continue
            clean = call_text(expected.tool, expected.args)
            detail = f"step #{expected.ordinal} {clean} of the clean run did not run here"
            return [Violation(DETERMINISTIC, detail)]
        if (step.tool, step.args) != (expected.tool, expected.args):
            return [Violation(DETERMINISTIC, divergence(expected, step, "the clean run"))]
    return []


def divergence(expected: StepView, step: StepView, recorded: str = "the recorded run") -> str:
    """How a step differs from the recorded one, naming both calls."""
    return (
        f"step #{step.ordinal} was {call_text(step.tool, step.args)} here and "
        f"{call_text(expected.tool, expected.args)} in {recorded}"
    )
