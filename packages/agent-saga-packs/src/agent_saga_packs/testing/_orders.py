"""A medication order book in SQLite: orders placed and cancelled, each idempotent by key.

It stands in for the hospital's order system (CPOE) in the pack's tests and README; the pack
talks to a real one through the :class:`agent_saga_packs.clinical.OrderSystem` protocol.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._sqlite import create_tables, transaction

_SCHEMA = """
CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, key TEXT UNIQUE NOT NULL,
  patient TEXT NOT NULL, drug TEXT NOT NULL, dose REAL NOT NULL, unit TEXT NOT NULL,
  dose_mg REAL NOT NULL, route TEXT NOT NULL, at REAL NOT NULL,
  cancelled_by TEXT, cancelled_at REAL, cancel_seq INTEGER);
"""


class OrderError(Exception):
    """The order system refused a request (an unknown order)."""


class SQLiteOrderBook:
    """Medication orders in a SQLite file shared by every process that opens it.

    Every method is one transaction: when it returns the effect is on disk.

    Args:
        path: the database file (created on first use).
        clock: epoch seconds, stamped on each order (inject a fake in tests).
    """

    def __init__(
        self, path: str | os.PathLike[str], *, clock: Callable[[], float] = time.time
    ) -> None:
        self.path = Path(path)
        self.clock = clock
        create_tables(self.path, _SCHEMA)

    def place(
        self,
        patient: str,
        drug: str,
        dose: float,
        unit: str,
        dose_mg: float,
        route: str,
        *,
        idempotency_key: str,
    ) -> dict[str, Any]:
        """Place an order; the same key returns the first order."""
        with transaction(self.path) as db:
            row = db.execute("SELECT * FROM orders WHERE key = ?", (idempotency_key,)).fetchone()
            if row is None:
                count = db.execute("SELECT COUNT(*) FROM orders").fetchone()[0]
                db.execute(
                    "INSERT INTO orders VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, NULL)",
                    (
                        f"ord_{count + 1:04d}",
                        idempotency_key,
                        patient,
                        drug,
                        dose,
                        unit,
                        dose_mg,
                        route,
                        self.clock(),
                    ),
                )
                row = db.execute("SELECT * FROM orders WHERE key = ?", (idempotency_key,))
                row = row.fetchone()
        return _order(row)

    def cancel(self, order_id: str, *, idempotency_key: str) -> dict[str, Any]:
        """Cancel an order (a cancelled order stays cancelled; a second cancel changes nothing)."""
        with transaction(self.path) as db:
            row = db.execute("SELECT * FROM orders WHERE id = ?", (order_id,)).fetchone()
            if row is None:
                raise OrderError(f"cancel: no order {order_id!r}")
            if row["cancelled_by"] is None:
                seq = db.execute("SELECT COALESCE(MAX(cancel_seq), 0) + 1 FROM orders").fetchone()[
                    0
                ]
                db.execute(
                    "UPDATE orders SET cancelled_by = ?, cancelled_at = ?, cancel_seq = ? "
                    "WHERE id = ?",
                    (idempotency_key, self.clock(), seq, order_id),
                )
                row = db.execute("SELECT * FROM orders WHERE id = ?", (order_id,)).fetchone()
        return _order(row)

    def find(self, idempotency_key: str) -> dict[str, Any] | None:
        """The order placed with this key, or ``None``."""
        with transaction(self.path) as db:
            row = db.execute("SELECT * FROM orders WHERE key = ?", (idempotency_key,)).fetchone()
        return None if row is None else _order(row)

    def recent_orders(self, since: float) -> list[dict[str, Any]]:
        """Orders placed at or after ``since`` and not cancelled, oldest first."""
        with transaction(self.path) as db:
            rows = db.execute(
                "SELECT * FROM orders WHERE at >= ? AND cancelled_by IS NULL ORDER BY at",
                (since,),
            ).fetchall()
        return [_order(row) for row in rows]

    def active(self) -> list[tuple[str, str, float]]:
        """``(patient, drug, dose_mg)`` of every order not cancelled, in order."""
        with transaction(self.path) as db:
            rows = db.execute(
                "SELECT patient, drug, dose_mg FROM orders WHERE cancelled_by IS NULL ORDER BY id"
            ).fetchall()
        return [(row[0], row[1], row[2]) for row in rows]

    def cancellations(self) -> list[str]:
        """The ids of cancelled orders, in the order they were cancelled."""
        with transaction(self.path) as db:
            rows = db.execute(
                "SELECT id FROM orders WHERE cancel_seq IS NOT NULL ORDER BY cancel_seq"
            ).fetchall()
        return [row[0] for row in rows]

    def reset(self) -> None:
        """Remove every order."""
        with transaction(self.path) as db:
            db.execute("DELETE FROM orders")


def _order(row: Any) -> dict[str, Any]:
    return {
        "id": row["id"],
        "order_id": row["id"],
        "patient": row["patient"],
        "drug": row["drug"],
        "dose": row["dose"],
        "unit": row["unit"],
        "dose_mg": row["dose_mg"],
        "route": row["route"],
        "cancelled": row["cancelled_by"] is not None,
    }
