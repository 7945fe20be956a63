"""Fleet budgets through the control plane: a :class:`agent_saga.BudgetStore` over HTTP.

Each reservation is one request (``POST /v1/budgets/{name}/reserve``), atomic on the server
against the cap every agent shares. The hold id is chosen here, so a reservation whose answer
was lost is retried with the same id and the server returns the hold it made instead of
making a second. A reservation that cannot reach the server raises, and the gate refuses the
call (fail closed). Settling is retried the same way; if it still fails the core logs the hold
as unsettled and it keeps counting against the cap until reconciled.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any, NamedTuple

from .http import ServerClient, ServerRefused, ServerUnreachable


class Reservation(NamedTuple):
    hold_id: str | None
    spent: Decimal
    held: Decimal


class Hold(NamedTuple):
    hold_id: str
    account: str
    amount: Decimal
    saga: str
    ordinal: int


class ServerBudgetStore:
    """Budget accounts kept by the control plane (see the module docstring)."""

    kind = "server"

    def __init__(self, client: ServerClient, *, attempts: int = 3) -> None:
        self.client = client
        self.attempts = attempts

    def _retry(self, call: Callable[[], Any]) -> Any:
        for attempt in range(self.attempts):
            try:
                return call()
            except ServerUnreachable:
                if attempt == self.attempts - 1:
                    raise
                time.sleep(0.1 * (attempt + 1))
        raise AssertionError("unreachable")

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
        body = {
            "hold_id": os.urandom(12).hex(), "account": account, "amount": str(amount),
            "limit": str(limit), "saga": saga, "ordinal": ordinal, "keep_spent": keep_spent,
            "until": until,
        }  # fmt: skip
        answer = self._retry(lambda: self.client.post(f"/v1/budgets/{budget}/reserve", body))
        return Reservation(answer["hold_id"], Decimal(answer["spent"]), Decimal(answer["held"]))

    def settle(self, budget: str, hold_id: str, *, commit: bool) -> None:
        path = f"/v1/budgets/{budget}/holds/{hold_id}"
        self._retry(lambda: self.client.post(path, {"commit": commit}))

    def usage(self, budget: str, account: str) -> tuple[Decimal, Decimal]:
        answer = self.client.get(f"/v1/budgets/{budget}/usage", params={"account": account})
        return Decimal(answer["spent"]), Decimal(answer["held"])

    def holds(self, budget: str) -> list[Hold]:
        answer = self.client.get(f"/v1/budgets/{budget}/holds")
        return [
            Hold(h["hold_id"], h["account"], Decimal(h["amount"]), h["saga"], int(h["ordinal"]))
            for h in answer["holds"]
        ]

    def health(self) -> list[str]:
        try:
            self.client.get("/v1/budgets")
        except (ServerUnreachable, ServerRefused) as exc:
            return [f"budget store unreachable: {exc}"]
        return []

    def describe(self) -> dict[str, object]:
        return {
            "kind": "server",
            "where": self.client.url,
            "durable": True,
            "shared": "every agent of the control plane (the server's cap also applies)",
        }


__all__ = ["Hold", "Reservation", "ServerBudgetStore"]
