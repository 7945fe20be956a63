"""A bank that keeps its books in SQLite: charges, refunds and wires, each idempotent by key.

It behaves as the payment APIs agents call do (Stripe's charges and refunds, a treasury
system's wires): a second request with the same idempotency key returns the first result and
moves no money. The pack's tests and README run against it; in production the pack talks to
your provider through the same :class:`agent_saga_packs.payments.Bank` protocol.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._sqlite import create_tables, transaction

_SCHEMA = """
CREATE TABLE IF NOT EXISTS charges (id TEXT PRIMARY KEY, key TEXT UNIQUE NOT NULL,
  customer TEXT NOT NULL, amount INTEGER NOT NULL, currency TEXT NOT NULL, at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS refunds (id TEXT PRIMARY KEY, key TEXT UNIQUE NOT NULL,
  charge_id TEXT UNIQUE NOT NULL REFERENCES charges(id), amount INTEGER NOT NULL,
  at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS wires (id TEXT PRIMARY KEY, key TEXT UNIQUE NOT NULL,
  beneficiary TEXT NOT NULL, amount INTEGER NOT NULL, currency TEXT NOT NULL,
  reference TEXT NOT NULL, at REAL NOT NULL);
"""


class BankError(Exception):
    """The bank refused a request (an unknown charge, a bad amount)."""


class LedgerBank:
    """Charges, refunds and wires in a SQLite file shared by every process that opens it.

    Amounts are integers in minor units (cents). Every method is one transaction: when it
    returns the effect is on disk; when it raises nothing changed.

    Args:
        path: the database file (created with its tables on first use).
        clock: epoch seconds, stamped on each effect (inject a fake in tests).
    """

    def __init__(
        self, path: str | os.PathLike[str], *, clock: Callable[[], float] = time.time
    ) -> None:
        self.path = Path(path)
        self.clock = clock
        create_tables(self.path, _SCHEMA)

    def charge(
        self, customer: str, amount: int, currency: str, *, idempotency_key: str
    ) -> dict[str, Any]:
        """Take ``amount`` from ``customer``; the same key returns the first charge."""
        _check_amount(amount)
        with transaction(self.path) as db:
            row = db.execute("SELECT * FROM charges WHERE key = ?", (idempotency_key,)).fetchone()
            if row is None:
                count = db.execute("SELECT COUNT(*) FROM charges").fetchone()[0]
                db.execute(
                    "INSERT INTO charges VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        f"ch_{count + 1:04d}",
                        idempotency_key,
                        customer,
                        amount,
                        currency,
                        self.clock(),
                    ),
                )
                row = db.execute("SELECT * FROM charges WHERE key = ?", (idempotency_key,))
                row = row.fetchone()
        return _charge(row)

    def find_charge(self, idempotency_key: str) -> dict[str, Any] | None:
        """The charge made with this key, or ``None``."""
        with transaction(self.path) as db:
            row = db.execute("SELECT * FROM charges WHERE key = ?", (idempotency_key,)).fetchone()
        return None if row is None else _charge(row)

    def refund(self, charge_id: str, *, idempotency_key: str) -> dict[str, Any]:
        """Refund a charge in full. A charge is refunded at most once, whatever the key."""
        with transaction(self.path) as db:
            charge = db.execute("SELECT * FROM charges WHERE id = ?", (charge_id,)).fetchone()
            if charge is None:
                raise BankError(f"refund: no charge {charge_id!r}")
            row = db.execute("SELECT * FROM refunds WHERE charge_id = ?", (charge_id,)).fetchone()
            if row is None:
                count = db.execute("SELECT COUNT(*) FROM refunds").fetchone()[0]
                db.execute(
                    "INSERT INTO refunds VALUES (?, ?, ?, ?, ?)",
                    (
                        f"re_{count + 1:04d}",
                        idempotency_key,
                        charge_id,
                        charge["amount"],
                        self.clock(),
                    ),
                )
                row = db.execute("SELECT * FROM refunds WHERE charge_id = ?", (charge_id,))
                row = row.fetchone()
        return {"refund_id": row["id"], "charge_id": row["charge_id"], "amount": row["amount"]}

    def wire(
        self,
        beneficiary: str,
        amount: int,
        currency: str,
        reference: str,
        *,
        idempotency_key: str,
    ) -> dict[str, Any]:
        """Send a wire (final once made); the same key returns the first wire."""
        _check_amount(amount)
        with transaction(self.path) as db:
            row = db.execute("SELECT * FROM wires WHERE key = ?", (idempotency_key,)).fetchone()
            if row is None:
                count = db.execute("SELECT COUNT(*) FROM wires").fetchone()[0]
                db.execute(
                    "INSERT INTO wires VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        f"wt_{count + 1:04d}",
                        idempotency_key,
                        beneficiary,
                        amount,
                        currency,
                        reference,
                        self.clock(),
                    ),
                )
                row = db.execute("SELECT * FROM wires WHERE key = ?", (idempotency_key,))
                row = row.fetchone()
        return _wire(row)

    def find_wire(self, idempotency_key: str) -> dict[str, Any] | None:
        """The wire sent with this key, or ``None``."""
        with transaction(self.path) as db:
            row = db.execute("SELECT * FROM wires WHERE key = ?", (idempotency_key,)).fetchone()
        return None if row is None else _wire(row)

    def recent_charges(self, since: float) -> list[dict[str, Any]]:
        """Charges made at or after ``since`` (epoch seconds) and not refunded, oldest first
        (what :class:`~agent_saga_packs.DuplicateWithin` reads to refuse a charge made twice)."""
        with transaction(self.path) as db:
            rows = db.execute(
                "SELECT c.* FROM charges c LEFT JOIN refunds r ON r.charge_id = c.id "
                "WHERE c.at >= ? AND r.id IS NULL ORDER BY c.at",
                (since,),
            )
            return [_charge(row) for row in rows.fetchall()]

    def recent_wires(self, since: float) -> list[dict[str, Any]]:
        """Wires sent at or after ``since`` (epoch seconds), oldest first."""
        with transaction(self.path) as db:
            rows = db.execute("SELECT * FROM wires WHERE at >= ? ORDER BY at", (since,))
            return [_wire(row) for row in rows.fetchall()]

    def balances(self) -> dict[str, int]:
        """Net money taken per customer (charges less refunds; none left out), and wired per
        beneficiary."""
        with transaction(self.path) as db:
            taken = db.execute(
                "SELECT c.customer, SUM(c.amount - COALESCE(r.amount, 0)) FROM charges c "
                "LEFT JOIN refunds r ON r.charge_id = c.id GROUP BY c.customer"
            ).fetchall()
            wired = db.execute(
                "SELECT beneficiary, SUM(amount) FROM wires GROUP BY beneficiary"
            ).fetchall()
        out = {f"charged:{name}": int(total) for name, total in taken if total}
        out.update({f"wired:{name}": int(total) for name, total in wired})
        return out

    def refunds(self) -> list[str]:
        """The charge ids refunded, in the order the refunds were made."""
        with transaction(self.path) as db:
            rows = db.execute("SELECT charge_id FROM refunds ORDER BY rowid").fetchall()
        return [row[0] for row in rows]

    def reset(self) -> None:
        """Empty the books."""
        with transaction(self.path) as db:
            for table in ("refunds", "charges", "wires"):
                db.execute(f"DELETE FROM {table}")  # noqa: S608 - fixed table names


def _check_amount(amount: object) -> None:
    if isinstance(amount, bool) or not isinstance(amount, int) or amount <= 0:
        raise BankError(f"amount must be a positive integer of minor units, got {amount!r}")


def _charge(row: Any) -> dict[str, Any]:
    return {
        "charge_id": row["id"],
        "customer": row["customer"],
        "amount": row["amount"],
        "currency": row["currency"],
    }


def _wire(row: Any) -> dict[str, Any]:
    return {
        "id": row["id"],
        "wire_id": row["id"],
        "beneficiary": row["beneficiary"],
        "amount": row["amount"],
        "currency": row["currency"],
        "reference": row["reference"],
        "at": row["at"],
    }
