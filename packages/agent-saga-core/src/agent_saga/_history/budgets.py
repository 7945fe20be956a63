"""Settling budget reservations after a crash, from the log (run by ``AgentKit.recover()``).

Above the saga layer: it reads the log's history to learn each saga's outcome.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from .._gate.budget import ReconcileReport, iter_budgets, reconcile_holds
from .._gate.budget_file import FileBudgetStore
from .._log.records import Record
from .build import sagas


def settle_abandoned(
    rules: Iterable[object], records: Iterable[Record], home: Path | None = None
) -> dict[str, ReconcileReport]:
    """Reconcile budgets against the sagas in ``records`` (a log).

    Every budget among ``rules`` is reconciled in its own store; with ``home``, so is every
    budget kept in that home's file store, configured here or not (``agent-saga recover``
    knows no rules, and settling needs only the budget's name).
    """
    budgets = list(iter_budgets(rules))
    home_store = FileBudgetStore(home) if home is not None else None
    home_names = home_store.names() if home_store is not None else []
    if not budgets and not home_names:
        return {}
    views = sagas(records)
    reports = {budget.name: budget.reconcile(views) for budget in budgets}
    covered = {
        budget.name
        for budget in budgets
        if isinstance(budget.store, FileBudgetStore)
        and home_store is not None
        and budget.store.dir == home_store.dir
    }
    for name in home_names:
        if name not in covered and home_store is not None:
            reports.setdefault(name, reconcile_holds(home_store, name, views))
    return reports


__all__ = ["settle_abandoned"]
