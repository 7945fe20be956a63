"""Budget stores against a model, under random reserve / commit / release / reopen sequences:
``spent + held`` never exceeds the limit, a reservation is refused exactly when it would, and
settling twice changes nothing."""

from __future__ import annotations

import shutil
import tempfile
from decimal import Decimal
from pathlib import Path

from agent_saga import FileBudgetStore, MemoryBudgetStore
from agent_saga._gate.budget_store import BudgetStore
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    multiple,
    rule,
)

LIMIT = Decimal(100)
ACCOUNTS = ["all", "saga:a", "saga:b"]


class BudgetMachine(RuleBasedStateMachine):
    """The store under test and a model: per account, what is spent and each hold's amount."""

    holds = Bundle("holds")

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="agent-saga-budget-"))
        self.store: BudgetStore = self.open()
        self.spent = dict.fromkeys(ACCOUNTS, Decimal(0))
        self.held: dict[str, tuple[str, Decimal, bool]] = {}

    def open(self) -> BudgetStore:
        return MemoryBudgetStore()

    def used(self, account: str) -> Decimal:
        held = sum((a for acc, a, _ in self.held.values() if acc == account), Decimal(0))
        return self.spent[account] + held

    @rule(
        target=holds,
        account=st.sampled_from(ACCOUNTS),
        amount=st.decimals(min_value=1, max_value=60, places=2),
        keep=st.booleans(),
    )
    def reserve(self, account: str, amount: Decimal, keep: bool) -> object:
        fits = self.used(account) + amount <= LIMIT
        answer = self.store.reserve(
            "b", account, amount, LIMIT, saga="s", ordinal=1, keep_spent=keep, until=None
        )
        assert (answer.hold_id is not None) == fits
        if answer.hold_id is None:
            assert answer.spent + answer.held == self.used(account)
            return multiple()
        self.held[answer.hold_id] = (account, amount, keep)
        return answer.hold_id

    @rule(hold=consumes(holds), commit=st.booleans(), twice=st.booleans())
    def settle(self, hold: str, commit: bool, twice: bool) -> None:
        self.store.settle("b", hold, commit=commit)
        if twice:
            self.store.settle("b", hold, commit=not commit)  # already settled: no effect
        account, amount, keep = self.held.pop(hold)
        if commit and keep:
            self.spent[account] += amount

    @invariant()
    def matches_the_model(self) -> None:
        for account in ACCOUNTS:
            spent, held = self.store.usage("b", account)
            assert spent + held <= LIMIT
            model_held = sum((a for acc, a, _ in self.held.values() if acc == account), Decimal(0))
            assert (spent, held) == (self.spent[account], model_held)
        assert {h.hold_id for h in self.store.holds("b")} == set(self.held)

    def teardown(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


class FileBudgetMachine(BudgetMachine):
    def open(self) -> BudgetStore:
        return FileBudgetStore(self.dir)

    @rule()
    def reopen(self) -> None:
        """A restart: a fresh store object reads the state from disk."""
        self.store = FileBudgetStore(self.dir)


TestMemoryBudgetStore = BudgetMachine.TestCase
TestMemoryBudgetStore.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
TestFileBudgetStore = FileBudgetMachine.TestCase
TestFileBudgetStore.settings = settings(max_examples=25, stateful_step_count=20, deadline=None)
