"""Spend budgets: a cap reserved atomically before the effect, released on rollback, committed on
success.

A :class:`Budget` is a gate rule. :meth:`Budget.evaluate` checks that the call's amount is a
number that could fit at all; once every rule has allowed the call, the engine calls
:meth:`Budget.reserve`, which adds the amount to the account's *held* total in one atomic step
of the budget store, only if ``spent + held + amount <= limit``. The reservation is durable
before the tool runs (fsync on the file store, a synchronous commit on PostgreSQL). When the
saga commits, its reservations become *spent*; when it rolls back, the reservations of steps
that were undone (or never had an effect) are released, and those of steps whose compensation
failed are committed, since their effect stands.

Accounts: ``per="all"`` is one account for every saga using the store (give each agent its own
budget name for a per-agent cap; kits sharing a PostgreSQL store share the cap fleet-wide);
``per="saga"`` caps each saga apart. ``window=3600`` starts a fresh account every hour (windows
are aligned to the epoch, on the clock given).

A process that dies between reserving and settling leaves its reservation held: it keeps
counting against the limit (fail safe) until :meth:`Budget.reconcile` settles it from the log,
which ``AgentKit.recover()`` does after finishing the dead process's sagas.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal, Protocol

from .._clock import Clock, SystemClock
from .._errors import ConfigurationError
from .._log.files import safe_name
from .._log.records import SagaStatus
from .budget_store import BudgetStore, MemoryBudgetStore
from .decisions import ALLOW, Decision, Deny, ToolCall
from .rules import describe_scope, is_number, tool_scope

BudgetScope = Literal["all", "saga"]


class SagaOutcome(Protocol):
    """What settling a reservation needs to know of a saga (a history ``SagaView`` has it)."""

    @property
    def id(self) -> str: ...

    @property
    def status(self) -> SagaStatus: ...


# -- the rule ------------------------------------------------------------------------------------


class BudgetHold:
    """One reservation; :meth:`commit` and :meth:`release` are idempotent and exclusive."""

    def __init__(self, store: BudgetStore, budget: str, hold_id: str) -> None:
        self.store, self.budget, self.hold_id = store, budget, hold_id
        self._settled = False
        self._lock = threading.Lock()

    def _settle(self, commit: bool) -> None:
        with self._lock:
            if self._settled:
                return
            self.store.settle(self.budget, self.hold_id, commit=commit)
            self._settled = True

    def commit(self) -> None:
        self._settle(True)

    def release(self) -> None:
        self._settle(False)

    def __repr__(self) -> str:
        return f"BudgetHold({self.budget!r}, {self.hold_id!r})"


@dataclass(frozen=True)
class ReconcileReport:
    """What :meth:`Budget.reconcile` did with the reservations it found."""

    committed: tuple[str, ...] = ()
    released: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()


class Budget:
    """A spend limit on the numeric argument at ``amount`` (dotted path) of the given tools.

    Args:
        name: the budget's name; kits on the same store with the same name share the cap.
        limit: the most that may be spent (and held) per account.
        amount: the dotted path of the amount in the call's arguments.
        tools: the tools that spend from it (``None``: every tool).
        per: ``"all"`` (one account) or ``"saga"`` (each saga its own account).
        window: seconds per window (a fresh account each window), or ``None``.
        store: a :class:`BudgetStore`, ``"memory"``, a ``postgresql://`` URL, or ``None`` for the
            durable file store in the agent-saga home (``$AGENT_SAGA_HOME`` or ``./.agent-saga``).
        clock: used for windows.
    """

    kind = "budget"

    def __init__(
        self,
        name: str,
        limit: float | Decimal,
        *,
        amount: str = "amount",
        tools: Iterable[str] | str | None = None,
        per: BudgetScope = "all",
        window: float | None = None,
        store: BudgetStore | str | None = None,
        clock: Clock | None = None,
    ) -> None:
        try:
            self.name = safe_name(name)
        except ValueError:
            raise ConfigurationError(f"budget name must be [A-Za-z0-9._-], got {name!r}") from None
        if isinstance(limit, bool) or not (
            (isinstance(limit, Decimal) and limit.is_finite()) or is_number(limit)
        ):
            raise ConfigurationError(f"budget limit must be a finite number, got {limit!r}")
        if limit < 0:
            raise ConfigurationError(f"budget limit must not be negative, got {limit!r}")
        if per not in ("all", "saga"):
            raise ConfigurationError(f"per must be 'all' or 'saga', got {per!r}")
        if window is not None and not (is_number(window) and window > 0):
            raise ConfigurationError(f"window must be a positive number of seconds: {window!r}")
        self.limit = Decimal(str(limit))
        self.path, self.per, self.window = amount, per, window
        self.tools = tool_scope(tools)
        self.store = open_budget_store(store)
        self._clock = clock or SystemClock()

    def _amount(self, call: ToolCall) -> tuple[Decimal | None, str]:
        value = call.arg(self.path)
        if not is_number(value) or value < 0:
            return None, f"{self.path}={value!r} is not a non-negative number"
        return Decimal(str(value)), ""

    def _account(self, saga_id: str) -> tuple[str, float | None]:
        account = "all" if self.per == "all" else f"saga:{saga_id}"
        if self.window is None:
            return account, None
        index = math.floor(self._clock.now() / self.window)
        return f"{account}@{index}", (index + 1) * self.window

    def evaluate(self, call: ToolCall) -> Decision:
        if self.tools is not None and call.tool not in self.tools:
            return ALLOW
        amount, problem = self._amount(call)
        if amount is None:
            return Deny(self.name, problem)
        if amount > self.limit:
            return Deny(self.name, f"{self.path}={amount} exceeds the whole budget of {self.limit}")
        return ALLOW

    def reserve(self, call: ToolCall) -> BudgetHold | Deny | None:
        """Hold the call's amount, atomically and durably; ``Deny`` when it does not fit."""
        if self.tools is not None and call.tool not in self.tools:
            return None
        amount, problem = self._amount(call)
        if amount is None:
            return Deny(self.name, problem)
        if amount == 0:
            return None
        account, until = self._account(call.saga_id)
        if amount > self.limit:
            return Deny(self.name, f"{self.path}={amount} exceeds the whole budget of {self.limit}")
        answer = self.store.reserve(
            self.name,
            account,
            amount,
            self.limit,
            saga=call.saga_id,
            ordinal=call.ordinal,
            keep_spent=self.per == "all",
            until=until,
        )
        if answer.hold_id is None:
            used = answer.spent + answer.held
            return Deny(
                self.name,
                f"{self.path}={amount} would bring {self._what()} to {used + amount}, "
                f"above the limit of {self.limit} ({answer.spent} spent, {answer.held} held)",
            )
        return BudgetHold(self.store, self.name, answer.hold_id)

    def _what(self) -> str:
        what = "spending" if self.per == "all" else "this saga's spending"
        return what if self.window is None else f"{what} in this {self.window:g} s window"

    def usage(self, saga_id: str | None = None) -> tuple[Decimal, Decimal]:
        """``(spent, held)`` of the current account (of ``saga_id`` for per-saga budgets)."""
        return self.store.usage(self.name, self._account(saga_id or "")[0])

    def reconcile(self, sagas: Iterable[SagaOutcome]) -> ReconcileReport:
        """Settle reservations left by dead processes, from their sagas' outcome in the log.

        Committed saga: commit; rolled back: release; running or needs a human: keep (held).
        Reservations of sagas the log does not know are kept.
        """
        return reconcile_holds(self.store, self.name, sagas)

    def health(self) -> list[str]:
        return self.store.health()

    def describe(self) -> str:
        scope = "in total" if self.per == "all" else "per saga"
        window = f" per {self.window:g} s window" if self.window is not None else ""
        return (
            f"{self.path} spent {scope}{window} <= {self.limit} on {describe_scope(self.tools)}; "
            f"{self.store.kind} store, reserved before the effect, released on rollback"
        )


def open_budget_store(store: BudgetStore | str | None) -> BudgetStore:
    if store is None:
        from .._config import resolve_home
        from .budget_file import FileBudgetStore

        return FileBudgetStore(resolve_home(None))
    if store == "memory":
        return MemoryBudgetStore()
    if isinstance(store, str) and store.startswith(("postgresql://", "postgres://")):
        from .budget_pg import PostgresBudgetStore

        return PostgresBudgetStore(store)
    if isinstance(store, str):
        raise ConfigurationError(
            f"budget store must be 'memory', a postgresql:// URL or a BudgetStore, got {store!r}"
        )
    return store


def iter_budgets(rules: Iterable[object]) -> Iterator[Budget]:
    """The budgets among a gate's rules."""
    return (rule for rule in rules if isinstance(rule, Budget))


def reconcile_holds(store: BudgetStore, name: str, sagas: Iterable[SagaOutcome]) -> ReconcileReport:
    """:meth:`Budget.reconcile` for budget ``name`` in ``store`` (settling needs no limit)."""
    status = {view.id: view.status for view in sagas}
    done: dict[str, list[str]] = {"committed": [], "released": [], "kept": []}
    for hold in store.holds(name):
        outcome = status.get(hold.saga)
        if outcome is SagaStatus.COMMITTED:
            store.settle(name, hold.hold_id, commit=True)
            done["committed"].append(hold.hold_id)
        elif outcome is SagaStatus.ROLLED_BACK:
            store.settle(name, hold.hold_id, commit=False)
            done["released"].append(hold.hold_id)
        else:
            done["kept"].append(hold.hold_id)
    return ReconcileReport(*(tuple(done[k]) for k in ("committed", "released", "kept")))


__all__ = [
    "Budget",
    "BudgetHold",
    "ReconcileReport",
    "iter_budgets",
    "open_budget_store",
    "reconcile_holds",
]
