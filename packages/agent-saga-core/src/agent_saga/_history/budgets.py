"""Settling budget reservations after a crash, from the log (run by ``AgentKit.recover()``).

Above the saga layer: it reads the log's history to learn each saga's outcome. Only the sagas
that hold a reservation are read (through the saga index on a file store, see
:func:`.sagareads.saga_views`), so settling costs what the reservations touch, not the log's
age; with no reservation at all nothing of the log is read.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from .._gate.budget import ReconcileReport, iter_budgets, reconcile_holds
from .._gate.budget_file import FileBudgetStore
from .._log.store import LogStore
from .sagareads import saga_views


def settle_abandoned(
    rules: Iterable[object], store: LogStore, home: Path | None = None
) -> dict[str, ReconcileReport]:
    """Reconcile budgets against the outcome, in ``store``'s log, of the sagas they hold
    reservations for.

    Every budget among ``rules`` is reconciled in its own store; with ``home``, so is every
    budget kept in that home's file store, configured here or not (``agent-saga recover``
    knows no rules, and settling needs only the budget's name).
    """
    budgets = list(iter_budgets(rules))
    home_store = FileBudgetStore(home) if home is not None else None
    home_names = home_store.names() if home_store is not None else []
    if not budgets and not home_names:
        return {}
    covered = {
        budget.name
        for budget in budgets
        if isinstance(budget.store, FileBudgetStore)
        and home_store is not None
        and budget.store.dir == home_store.dir
    }
    held = {hold.saga for budget in budgets for hold in budget.store.holds(budget.name)}
    if home_store is not None:
        held.update(hold.saga for name in home_names for hold in home_store.holds(name))
    views = saga_views(store, sorted(held)) if held else []
    reports = {budget.name: budget.reconcile(views) for budget in budgets}
    for name in home_names:
        if name not in covered and home_store is not None:
            reports.setdefault(name, reconcile_holds(home_store, name, views))
    return reports


__all__ = ["settle_abandoned"]
