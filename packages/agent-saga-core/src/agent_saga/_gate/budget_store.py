"""Where budgets keep their accounts: the store protocol, the accounting shared by the memory
and file stores, and the in-memory store.

An account has ``spent`` (committed) and the holds taken against it (``held``); a reservation
succeeds only when ``spent + held + amount <= limit``. Amounts are :class:`~decimal.Decimal`,
stored as decimal strings, so sums are exact.
"""

from __future__ import annotations

import os
import threading
from decimal import Decimal
from typing import Any, NamedTuple, Protocol


class Reservation(NamedTuple):
    """A store's answer to a reservation: the hold's id, or ``None`` with the usage that refused."""

    hold_id: str | None
    spent: Decimal
    held: Decimal


class HoldRow(NamedTuple):
    """An outstanding reservation as the store keeps it."""

    hold_id: str
    account: str
    amount: Decimal
    saga: str
    ordinal: int


class BudgetStore(Protocol):
    """Where budgets' accounts live; every method is atomic across threads and processes."""

    kind: str

    def reserve(
        self,
        budget: str,
        account: str,
        amount: Decimal,
        limit: Decimal,
        *,
        saga: str,
        ordinal: int,
        keep_spent: bool,
        until: float | None,
    ) -> Reservation:
        """Hold ``amount`` if ``spent + held + amount <= limit``; durable when it returns."""
        ...

    def settle(self, budget: str, hold_id: str, *, commit: bool) -> None:
        """Commit (held -> spent) or release a hold; idempotent."""
        ...

    def usage(self, budget: str, account: str) -> tuple[Decimal, Decimal]:
        """``(spent, held)`` of an account now."""
        ...

    def holds(self, budget: str) -> list[HoldRow]: ...

    def health(self) -> list[str]: ...

    def describe(self) -> dict[str, object]: ...


def new_hold_id() -> str:
    return os.urandom(12).hex()


# -- the accounting shared by the memory and file stores -----------------------------------------


def empty_state() -> dict[str, Any]:
    return {"v": 1, "accounts": {}, "holds": {}}


def state_reserve(
    state: dict[str, Any],
    account: str,
    amount: Decimal,
    limit: Decimal,
    meta: dict[str, Any],
) -> Reservation:
    """Reserve in a JSON-shaped state (amounts as decimal strings)."""
    accounts: dict[str, Any] = state["accounts"]
    holds: dict[str, Any] = state["holds"]
    row = accounts.get(account) or {"spent": "0", "until": meta.get("until")}
    spent = Decimal(row["spent"])
    held = sum(
        (Decimal(h["amount"]) for h in holds.values() if h["account"] == account), Decimal(0)
    )
    if spent + held + amount > limit:
        return Reservation(None, spent, held)
    hold_id = new_hold_id()
    until = meta.get("until")
    if until is not None and account not in accounts:  # a new window: drop ended idle ones
        busy = {h["account"] for h in holds.values()}
        for name, data in list(accounts.items()):
            if name not in busy and data.get("until") is not None and data["until"] < until:
                del accounts[name]
    accounts[account] = row
    holds[hold_id] = {"account": account, "amount": str(amount), **meta}
    return Reservation(hold_id, spent, held + amount)


def state_settle(state: dict[str, Any], hold_id: str, *, commit: bool) -> bool:
    """Settle a hold in a JSON-shaped state; returns whether anything changed.

    An account left with nothing spent and nothing held is dropped (per-saga accounts end
    this way); accounts of ended windows are dropped when a later window opens.
    """
    hold = state["holds"].pop(hold_id, None)
    if hold is None:
        return False
    account = hold["account"]
    row = state["accounts"].get(account)
    if row is not None and commit and hold.get("keep", True):
        row["spent"] = str(Decimal(row["spent"]) + Decimal(hold["amount"]))
    in_use = any(h["account"] == account for h in state["holds"].values())
    if row is not None and not in_use and Decimal(row["spent"]) == 0:
        del state["accounts"][account]
    return True


def state_usage(state: dict[str, Any], account: str) -> tuple[Decimal, Decimal]:
    row = state["accounts"].get(account)
    spent = Decimal(row["spent"]) if row else Decimal(0)
    held = sum(
        (Decimal(h["amount"]) for h in state["holds"].values() if h["account"] == account),
        Decimal(0),
    )
    return spent, held


def state_holds(state: dict[str, Any]) -> list[HoldRow]:
    return [
        HoldRow(hold_id, h["account"], Decimal(h["amount"]), h["saga"], int(h["ordinal"]))
        for hold_id, h in state["holds"].items()
    ]


class MemoryBudgetStore:
    """Budgets in this process only (tests, single-process tools); nothing survives the process."""

    kind = "memory"

    def __init__(self) -> None:
        self._states: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def _state(self, budget: str) -> dict[str, Any]:
        return self._states.setdefault(budget, empty_state())

    def reserve(
        self,
        budget: str,
        account: str,
        amount: Decimal,
        limit: Decimal,
        *,
        saga: str,
        ordinal: int,
        keep_spent: bool,
        until: float | None,
    ) -> Reservation:
        meta = {"saga": saga, "ordinal": ordinal, "keep": keep_spent, "until": until}
        with self._lock:
            return state_reserve(self._state(budget), account, amount, limit, meta)

    def settle(self, budget: str, hold_id: str, *, commit: bool) -> None:
        with self._lock:
            state_settle(self._state(budget), hold_id, commit=commit)

    def usage(self, budget: str, account: str) -> tuple[Decimal, Decimal]:
        with self._lock:
            return state_usage(self._state(budget), account)

    def holds(self, budget: str) -> list[HoldRow]:
        with self._lock:
            return state_holds(self._state(budget))

    def health(self) -> list[str]:
        return []

    def describe(self) -> dict[str, object]:
        return {"kind": "memory", "durable": False, "shared": "this process only"}


__all__ = [
    "BudgetStore",
    "HoldRow",
    "MemoryBudgetStore",
    "Reservation",
    "empty_state",
    "new_hold_id",
    "state_holds",
    "state_reserve",
    "state_settle",
    "state_usage",
]
