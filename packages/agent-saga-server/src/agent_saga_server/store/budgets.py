"""Fleet budgets: reservations against caps shared by every agent, atomic under concurrency.

A reservation holds ``amount`` on an account of a budget only when
``spent + held + amount <= cap``, where ``cap`` is the smaller of the limit the agent's
``Budget`` declares and the cap an admin set on the server for that budget name (if any): the
server can only make a budget stricter. The check and the hold happen in one transaction with
the account's row locked (``FOR UPDATE`` on PostgreSQL; ``BEGIN IMMEDIATE`` serializes SQLite),
so agents on several replicas never overspend. Account rows are never deleted, so a lock always
has a row to hold. Holds carry the agent's hold id: a retried reservation returns the hold it
already made instead of making a second. Settling commits (held -> spent) or releases a hold,
once; settling again is a no-op.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from decimal import Decimal

from .db import Database, Tx


class BudgetRefused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class ReserveAnswer:
    hold_id: str | None
    spent: Decimal
    held: Decimal
    cap: Decimal


@dataclass(frozen=True)
class HoldInfo:
    hold_id: str
    budget: str
    account: str
    amount: Decimal
    origin: str
    saga: str
    ordinal: int


@dataclass(frozen=True)
class BudgetInfo:
    name: str
    cap: Decimal | None
    spent: Decimal
    held: Decimal


def _held(tx: Tx, budget: str, account: str) -> Decimal:
    rows = tx.all(
        "SELECT amount FROM budget_holds WHERE budget = ? AND account = ?", (budget, account)
    )
    return sum((Decimal(str(r[0])) for r in rows), Decimal(0))


def _cap(tx: Tx, budget: str) -> Decimal | None:
    row = tx.one("SELECT cap FROM budgets WHERE name = ?", (budget,))
    return None if row is None or row[0] is None else Decimal(str(row[0]))


def reserve(
    db: Database,
    budget: str,
    *,
    hold_id: str,
    account: str,
    amount: Decimal,
    limit: Decimal,
    origin: str,
    saga: str,
    ordinal: int,
    keep_spent: bool,
    until: float | None,
) -> ReserveAnswer:
    """Hold ``amount`` if it fits (see the module docstring); durable when this returns.

    Raises:
        BudgetRefused: 409 when ``hold_id`` is taken by another origin's hold.
    """
    with db.transaction() as tx:
        tx.execute(
            "INSERT INTO budget_accounts (budget, account, spent, until) VALUES (?, ?, '0', ?) "
            "ON CONFLICT (budget, account) DO NOTHING",
            (budget, account, until),
        )
        row = tx.one(
            "SELECT spent FROM budget_accounts WHERE budget = ? AND account = ?" + tx.lock_rows(),
            (budget, account),
        )
        assert row is not None
        spent = Decimal(str(row[0]))
        server_cap = _cap(tx, budget)
        cap = limit if server_cap is None else min(limit, server_cap)
        existing = tx.one("SELECT origin, amount FROM budget_holds WHERE hold_id = ?", (hold_id,))
        if existing is not None:
            if existing[0] != origin:
                raise BudgetRefused(409, f"hold id {hold_id} is taken")
            return ReserveAnswer(hold_id, spent, _held(tx, budget, account), cap)
        held = _held(tx, budget, account)
        if spent + held + amount > cap:
            return ReserveAnswer(None, spent, held, cap)
        tx.execute(
            "INSERT INTO budget_holds (hold_id, budget, account, amount, origin, saga, ordinal, "
            "keep, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                hold_id, budget, account, str(amount), origin, saga, ordinal,
                1 if keep_spent else 0, time.time(),
            ),
        )  # fmt: skip
        return ReserveAnswer(hold_id, spent, held + amount, cap)


def settle(db: Database, budget: str, hold_id: str, *, commit: bool, origin: str | None) -> bool:
    """Commit or release a hold; False when there is no such hold (already settled).

    ``origin``: when given, only that origin's holds may be settled.

    Raises:
        BudgetRefused: 403 when the hold belongs to another origin.
    """
    with db.transaction() as tx:
        hold = tx.one(
            "SELECT account, amount, origin, keep FROM budget_holds WHERE hold_id = ? "
            "AND budget = ?",
            (hold_id, budget),
        )
        if hold is None:
            return False
        account, amount, owner, keep = hold
        if origin is not None and owner != origin:
            raise BudgetRefused(403, f"hold {hold_id} belongs to another origin")
        row = tx.one(
            "SELECT spent FROM budget_accounts WHERE budget = ? AND account = ?" + tx.lock_rows(),
            (budget, account),
        )
        still = tx.one("SELECT hold_id FROM budget_holds WHERE hold_id = ?", (hold_id,))
        if row is None or still is None:  # settled by someone else meanwhile
            return False
        tx.execute("DELETE FROM budget_holds WHERE hold_id = ?", (hold_id,))
        if commit and keep:
            spent = Decimal(str(row[0])) + Decimal(str(amount))
            tx.execute(
                "UPDATE budget_accounts SET spent = ? WHERE budget = ? AND account = ?",
                (str(spent), budget, account),
            )
        return True


def usage(db: Database, budget: str, account: str) -> tuple[Decimal, Decimal]:
    with db.transaction(write=False) as tx:
        row = tx.one(
            "SELECT spent FROM budget_accounts WHERE budget = ? AND account = ?", (budget, account)
        )
        spent = Decimal(str(row[0])) if row else Decimal(0)
        return spent, _held(tx, budget, account)


def holds(db: Database, budget: str, origin: str | None) -> list[HoldInfo]:
    sql = (
        "SELECT hold_id, budget, account, amount, origin, saga, ordinal FROM budget_holds "
        "WHERE budget = ?"
    )
    params: list[object] = [budget]
    if origin is not None:
        sql += " AND origin = ?"
        params.append(origin)
    with db.transaction(write=False) as tx:
        rows = tx.all(sql + " ORDER BY created_at, hold_id", params)
    return [
        HoldInfo(str(h), str(b), str(a), Decimal(str(m)), str(o), str(s), int(n))
        for h, b, a, m, o, s, n in rows
    ]


def set_cap(db: Database, budget: str, cap: Decimal | None) -> None:
    with db.transaction() as tx:
        tx.execute(
            "INSERT INTO budgets (name, cap, updated_at) VALUES (?, ?, ?) ON CONFLICT (name) "
            "DO UPDATE SET cap = excluded.cap, updated_at = excluded.updated_at",
            (budget, None if cap is None else str(cap), time.time()),
        )


def list_budgets(db: Database) -> list[BudgetInfo]:
    """Every budget with a cap or an account, with its totals over all accounts."""
    with db.transaction(write=False) as tx:
        names = tx.all(
            "SELECT name FROM budgets UNION SELECT budget FROM budget_accounts ORDER BY 1"
        )
        out = []
        for (name,) in names:
            spent = sum(
                (
                    Decimal(str(r[0]))
                    for r in tx.all("SELECT spent FROM budget_accounts WHERE budget = ?", (name,))
                ),
                Decimal(0),
            )
            held = sum(
                (
                    Decimal(str(r[0]))
                    for r in tx.all("SELECT amount FROM budget_holds WHERE budget = ?", (name,))
                ),
                Decimal(0),
            )
            out.append(BudgetInfo(str(name), _cap(tx, name), spent, held))
        return out


__all__ = [
    "BudgetInfo",
    "BudgetRefused",
    "HoldInfo",
    "ReserveAnswer",
    "holds",
    "list_budgets",
    "reserve",
    "set_cap",
    "settle",
    "usage",
]
