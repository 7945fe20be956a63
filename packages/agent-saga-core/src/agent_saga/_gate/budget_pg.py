"""Budgets in PostgreSQL, shared by every host of a fleet.

Two tables beside the fleet's log: ``budget_accounts`` (``spent`` and ``held`` per budget and
account) and ``budget_holds`` (one row per outstanding reservation). A reservation is one
statement, so one transaction: an upsert of the account row that adds to ``held`` only
``WHERE spent + held + amount <= limit`` (PostgreSQL re-checks the condition on the latest row
version under the row lock, so concurrent reservations on any host serialize on the row and
the cap holds), chained to the insert of the hold. It is committed with
``synchronous_commit = on`` before :meth:`reserve` returns. Settling deletes the hold and moves
its amount out of ``held`` (into ``spent`` on commit) in one statement; a second settle finds no
hold and changes nothing.
"""

from __future__ import annotations

import contextlib
from decimal import Decimal
from typing import TYPE_CHECKING

from .._postgres.connection import (
    DEFAULT_SCHEMA,
    PgSession,
    check_schema_name,
    display_url,
    lock_key,
    one_line,
    require_psycopg,
)
from .budget_store import HoldRow, Reservation, new_hold_id

if TYPE_CHECKING:
    from .._postgres.connection import PgConnection

_DDL = """
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.budget_accounts (
    budget text NOT NULL,
    account text NOT NULL,
    spent numeric NOT NULL DEFAULT 0 CHECK (spent >= 0),
    held numeric NOT NULL DEFAULT 0 CHECK (held >= 0),
    until double precision,
    PRIMARY KEY (budget, account)
);
CREATE TABLE IF NOT EXISTS {s}.budget_holds (
    hold_id text PRIMARY KEY,
    budget text NOT NULL,
    account text NOT NULL,
    amount numeric NOT NULL CHECK (amount > 0),
    saga text NOT NULL,
    ordinal integer NOT NULL,
    keep boolean NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""

_QUERIES = {
    "reserve": """
WITH up AS (
    INSERT INTO {s}.budget_accounts AS a (budget, account, spent, held, until)
    VALUES (%(b)s, %(a)s, 0, %(amount)s, %(until)s)
    ON CONFLICT (budget, account) DO UPDATE SET held = a.held + EXCLUDED.held
    WHERE a.spent + a.held + EXCLUDED.held <= %(limit)s
    RETURNING 1
)
INSERT INTO {s}.budget_holds (hold_id, budget, account, amount, saga, ordinal, keep)
SELECT %(h)s, %(b)s, %(a)s, %(amount)s, %(saga)s, %(ordinal)s, %(keep)s FROM up
RETURNING hold_id""",
    "settle": """
WITH h AS (
    DELETE FROM {s}.budget_holds WHERE budget = %(b)s AND hold_id = %(h)s
    RETURNING account, amount, keep
)
UPDATE {s}.budget_accounts AS a SET held = a.held - h.amount,
    spent = a.spent + CASE WHEN %(commit)s AND h.keep THEN h.amount ELSE 0 END
FROM h WHERE a.budget = %(b)s AND a.account = h.account""",
    "prune": "DELETE FROM {s}.budget_accounts WHERE budget = %(b)s AND held = 0 AND spent = 0",
    "usage": "SELECT spent, held FROM {s}.budget_accounts WHERE budget = %s AND account = %s",
    "holds": "SELECT hold_id, account, amount, saga, ordinal FROM {s}.budget_holds"
    " WHERE budget = %s ORDER BY created_at",
}


class PostgresBudgetStore:
    """Fleet-wide budgets: every host with the same URL and schema shares each cap.

    Connecting is deferred to the first use; an unreachable server makes reservations fail
    (the call is refused) and :meth:`health` report the problem.
    """

    kind = "postgres"

    def __init__(self, url: str, *, schema: str = DEFAULT_SCHEMA, timeout: float = 5.0) -> None:
        require_psycopg()
        from psycopg import sql

        self.schema = check_schema_name(schema)
        self._timeout = timeout
        self.where = f"{display_url(url)} schema {schema}"
        ident = sql.Identifier(schema)
        self._q = {name: sql.SQL(text).format(s=ident) for name, text in _QUERIES.items()}
        self._session = PgSession(url, timeout, setup=self._setup)

    def _setup(self, conn: PgConnection) -> None:
        from psycopg import sql

        timeout_ms = str(int(self._timeout * 1000))
        conn.execute("SELECT set_config('statement_timeout', %s, false)", (timeout_ms,))
        present = conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = %s"
            " AND tablename IN ('budget_accounts', 'budget_holds')",
            (self.schema,),
        ).fetchone()
        if present is not None and present[0] == 2:
            return
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key(self.schema, "budgets"),))
            for statement in _DDL.split(";"):
                conn.execute(sql.SQL(statement.strip()).format(s=sql.Identifier(self.schema)))

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
        """Hold ``amount`` if it fits; committed synchronously when this returns.

        Not retried on a broken connection (a lost answer could hide a reservation): the hold
        is released, best effort, and the error raised, which refuses the call.
        """
        if amount > limit:
            spent, held = self.usage(budget, account)
            return Reservation(None, spent, held)
        hold_id = new_hold_id()
        params = {
            "b": budget,
            "a": account,
            "amount": amount,
            "until": until,
            "limit": limit,
            "h": hold_id,
            "saga": saga,
            "ordinal": ordinal,
            "keep": keep_spent,
        }
        try:
            with self._session.lock:
                row = self._session.connection().execute(self._q["reserve"], params).fetchone()
        except Exception:
            with contextlib.suppress(Exception):
                self.settle(budget, hold_id, commit=False)
            raise
        if row is not None:
            return Reservation(hold_id, Decimal(0), amount)
        spent, held = self.usage(budget, account)
        return Reservation(None, spent, held)

    def settle(self, budget: str, hold_id: str, *, commit: bool) -> None:
        self._session.query(self._q["settle"], {"b": budget, "h": hold_id, "commit": commit})
        self._session.query(self._q["prune"], {"b": budget})

    def usage(self, budget: str, account: str) -> tuple[Decimal, Decimal]:
        rows = self._session.query(self._q["usage"], (budget, account))
        if not rows:
            return Decimal(0), Decimal(0)
        return Decimal(rows[0][0]), Decimal(rows[0][1])

    def holds(self, budget: str) -> list[HoldRow]:
        return [
            HoldRow(str(r[0]), str(r[1]), Decimal(r[2]), str(r[3]), int(r[4]))
            for r in self._session.query(self._q["holds"], (budget,))
        ]

    def health(self) -> list[str]:
        try:
            self._session.query("SELECT 1")
        except Exception as exc:
            return [f"budget store unreachable: {self.where}: {one_line(exc)}"]
        return []

    def describe(self) -> dict[str, object]:
        return {"kind": "postgres", "where": self.where, "durable": True, "shared": "every host"}

    def close(self) -> None:
        self._session.close()


__all__ = ["PostgresBudgetStore"]
