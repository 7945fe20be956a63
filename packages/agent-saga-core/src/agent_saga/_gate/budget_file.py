"""Budgets on the file system: one JSON state per budget in ``<home>/budgets/``, changed under
an exclusive ``flock``.

Every change takes ``budgets/<name>.lock`` (``flock``, so threads and processes on this host
exclude each other and a dead holder's lock is released by the kernel), reads the state, and
writes the new state to a temporary file that is fsynced and renamed over the old one, then
fsyncs the directory. A reservation is therefore on stable storage when :meth:`reserve`
returns, and a crash at any point leaves either the old state or the new one. Network file
systems, where ``flock`` does not hold, are not supported (as for the file log).
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

from .._clock import SystemClock
from .._log.files import ensure_dir, fsync_dir, fsync_fd, safe_name
from .budget_store import (
    HoldRow,
    Reservation,
    empty_state,
    state_holds,
    state_reserve,
    state_settle,
    state_usage,
)

BUDGETS_DIR = "budgets"
_MAX_STATE = 64 * 1024 * 1024


class BudgetStateError(Exception):
    """A budget's state file cannot be read; reservations are refused until it is fixed."""


class FileBudgetStore:
    """Budgets that survive restarts, shared by every process using the same home."""

    kind = "file"

    def __init__(self, home: str | os.PathLike[str]) -> None:
        self.dir = Path(home) / BUDGETS_DIR
        self._now = SystemClock().now
        self._tmp_lock = threading.Lock()

    @contextmanager
    def _locked(self, budget: str, *, write: bool) -> Iterator[dict[str, Any]]:
        name = safe_name(budget)
        ensure_dir(self.dir)
        fd = os.open(self.dir / f"{name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            path = self.dir / f"{name}.json"
            state = self._read(path)
            before = json.dumps(state, sort_keys=True)
            yield state
            if write and json.dumps(state, sort_keys=True) != before:
                self._write(path, state)
        finally:
            os.close(fd)  # releases the flock

    def _read(self, path: Path) -> dict[str, Any]:
        try:
            with open(path, "rb") as handle:
                raw = handle.read(_MAX_STATE + 1)
        except FileNotFoundError:
            return empty_state()
        if len(raw) > _MAX_STATE:
            raise BudgetStateError(f"{path} is larger than {_MAX_STATE} bytes")
        try:
            state = json.loads(raw)
            if not (isinstance(state, dict) and state.get("v") == 1):
                raise ValueError("not a version-1 budget state")
            if not isinstance(state.get("accounts"), dict) or not isinstance(
                state.get("holds"), dict
            ):
                raise ValueError("accounts or holds missing")
        except ValueError as exc:
            raise BudgetStateError(f"{path} is not a budget state: {exc}") from exc
        return state

    def _write(self, path: Path, state: dict[str, Any]) -> None:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        data = json.dumps(state, sort_keys=True, separators=(",", ":")).encode()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            fsync_fd(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        fsync_dir(self.dir)

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
        """Hold ``amount`` if it fits; on stable storage when this returns."""
        meta = {
            "saga": saga,
            "ordinal": ordinal,
            "keep": keep_spent,
            "until": until,
            "pid": os.getpid(),
            "at": self._now(),
        }
        with self._locked(budget, write=True) as state:
            return state_reserve(state, account, amount, limit, meta)

    def settle(self, budget: str, hold_id: str, *, commit: bool) -> None:
        with self._locked(budget, write=True) as state:
            state_settle(state, hold_id, commit=commit)

    def usage(self, budget: str, account: str) -> tuple[Decimal, Decimal]:
        with self._locked(budget, write=False) as state:
            return state_usage(state, account)

    def holds(self, budget: str) -> list[HoldRow]:
        with self._locked(budget, write=False) as state:
            return state_holds(state)

    def names(self) -> list[str]:
        """The budgets that have a state in this home."""
        if not self.dir.is_dir():
            return []
        return sorted(
            path.stem for path in self.dir.glob("*.json") if not path.name.startswith(".")
        )

    def health(self) -> list[str]:
        """A problem when the budgets directory cannot be created or written."""
        try:
            ensure_dir(self.dir)
        except OSError as exc:
            return [f"budget directory {self.dir} unusable: {exc}"]
        if not os.access(self.dir, os.W_OK):
            return [f"budget directory {self.dir} is not writable"]
        problems = []
        for path in sorted(self.dir.glob("*.json")):
            try:
                self._read(path)
            except (BudgetStateError, OSError) as exc:
                problems.append(str(exc))
        return problems

    def describe(self) -> dict[str, object]:
        return {
            "kind": "file",
            "path": str(self.dir),
            "durable": True,
            "shared": "processes on this host using the same home",
        }


__all__ = ["BUDGETS_DIR", "BudgetStateError", "FileBudgetStore"]
