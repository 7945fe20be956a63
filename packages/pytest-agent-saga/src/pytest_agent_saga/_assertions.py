"""Assertions on what a transaction left in its log and in the world.

Each reads the log (or the user's own counters) and raises ``AssertionError`` with a message
that names the saga, the step and what is wrong; none of them trusts the engine's report.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_saga import (
    AgentKit,
    CompensationState,
    LogStore,
    RollbackReport,
    SagaRolledBack,
    SagaStatus,
    StepOutcome,
    build_history,
    find_saga,
    read_log,
    verify_file,
)

from ._invariants import _order
from ._words import step_name

if TYPE_CHECKING:
    from agent_saga import Record, SagaView, VerifyReport

LogSource = AgentKit | LogStore | str | os.PathLike[str] | Iterable["Record"]
"""A kit, a store, a home or log file path, or records already read."""


def records_of(log: LogSource) -> list[Record]:
    """The records of ``log``, read now."""
    if isinstance(log, AgentKit):
        return list(log.store.records())
    if isinstance(log, LogStore):
        return list(log.records())
    if isinstance(log, str | os.PathLike):
        return list(read_log(log))
    return list(log)


def assert_log_verifies(log: AgentKit | LogStore | str | os.PathLike[str]) -> VerifyReport:
    """Assert that the whole log verifies (hash chain, sequence, canonical form)."""
    __tracebackhide__ = True
    if isinstance(log, AgentKit | LogStore):
        report = log.verify()
    else:
        path = Path(log)
        report = verify_file(path / "log.jsonl" if path.is_dir() else path)
    if not report.ok:
        raise AssertionError(
            f"the log does not verify after {report.records} good record(s): {report.error}"
        )
    return report


def _saga_id(saga: SagaRolledBack | RollbackReport | str) -> str:
    if isinstance(saga, SagaRolledBack | RollbackReport):
        return saga.saga_id
    if isinstance(saga, str):
        return saga
    raise TypeError(f"expected SagaRolledBack, RollbackReport or a saga id, got {saga!r}")


def assert_rolled_back(
    saga: SagaRolledBack | RollbackReport | str,
    log: LogSource,
    *,
    ledger: Any = None,
) -> SagaView:
    """Assert that every committed effect of ``saga`` was compensated, in reverse order.

    Args:
        saga: the exception the transaction raised, its report, or a saga id (or prefix).
        log: where the saga's records are.
        ledger: optional witness with ``events()`` of ``(action, key)``: a step that declares no
            compensation but left an effect under its idempotency key fails the assertion.

    Returns:
        The saga as its log tells it.
    """
    __tracebackhide__ = True
    records = records_of(log)
    view = find_saga(build_history(records).sagas, _saga_id(saga))
    if view.status is not SagaStatus.ROLLED_BACK:
        failed = [
            f"{step_name(s.ordinal, s.tool)} ({s.compensation_error})"
            for s in view.steps
            if s.compensation_state is CompensationState.FAILED
        ]
        why = f": failed compensation(s): {', '.join(failed)}" if failed else ""
        raise AssertionError(f"saga {view.id} ended {view.status.value}, not rolled back{why}")
    effects = Counter(getattr(e, "key", None) for e in ledger.events()) if ledger else Counter()
    problems = []
    for step in view.steps:
        if step.outcome is not StepOutcome.DONE:
            continue
        name = step_name(step.ordinal, step.tool)
        state = step.compensation_state
        if state is CompensationState.COMPENSATED:
            continue
        if state is CompensationState.NOT_NEEDED:
            if effects[step.idempotency_key]:
                problems.append(f"{name} left an effect and declares no compensation")
            continue
        problems.append(f"{name} was not compensated ({state.value})")
    problems += [v.detail for v in _order(view, records)]
    if problems:
        raise AssertionError(f"saga {view.id} was not fully rolled back: " + "; ".join(problems))
    return view


def _counts(effects: object, action: str | None) -> Counter[tuple[str, str]]:
    """``(action, key) -> count`` from a ledger, a mapping of counts, or delivered keys."""
    events = getattr(effects, "events", None)
    if callable(events):
        return Counter(
            (str(e.action), str(e.key))
            for e in events()
            if e.key and (action is None or e.action == action)
        )
    if isinstance(effects, Mapping):
        return Counter({(action or "", str(k)): int(n) for k, n in effects.items()})
    if isinstance(effects, Iterable) and not isinstance(effects, str | bytes):
        return Counter((action or "", str(k)) for k in effects)
    raise TypeError(
        "expected a ledger (with events()), a mapping of key to count, or delivered keys, "
        f"got {type(effects).__name__}"
    )


def assert_exactly_once(
    effects: object, *, keys: Iterable[str] | None = None, action: str | None = None
) -> None:
    """Assert that each idempotency key took effect exactly once.

    Args:
        effects: a ledger (``saga_ledger``, :class:`agent_saga.testing.Ledger`), your own
            counter (a mapping of key to count), or the keys as your system received them.
        keys: the keys that must each have taken effect once (default: every key seen).
        action: count only this ledger action (``"charge"``).
    """
    __tracebackhide__ = True
    counts = _counts(effects, action)
    problems = [
        f"key {key} took effect {n} times" + (f" ({act!r})" if act else "")
        for (act, key), n in sorted(counts.items())
        if n > 1
    ]
    if keys is not None:
        seen = {key for (_, key), n in counts.items() if n > 0}
        problems += [f"key {key} never took effect" for key in keys if key not in seen]
    if problems:
        raise AssertionError("not exactly once: " + "; ".join(problems))
