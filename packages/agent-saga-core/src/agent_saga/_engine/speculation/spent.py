"""Redeemed leases: a durable, single-use mark per lease.

``<home>/speculation/spent/<expiry ms>-<nonce>`` is created with ``O_CREAT | O_EXCL`` (one
process wins, whichever it is), then the file and its directory are fsynced before the
speculated result is handed to anyone. A crash after that leaves the lease spent: it can never
be redeemed again; a crash before it leaves it unspent and its result unused. Marks are deleted
a day after their lease expired (a clock that steps back by less than that cannot revive one).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Protocol

from ..._log.files import ensure_dir, fsync_dir, fsync_fd

SPENT_DIR = Path("speculation") / "spent"
KEEP_AFTER_EXPIRY = 24 * 3600.0
"""Seconds a mark outlives its lease."""
_PRUNE_EVERY = 60.0


class SpentLeases(Protocol):
    """Where redeemed leases are marked."""

    def is_spent(self, nonce: str, exp: int) -> bool:
        """Whether the lease was redeemed already."""
        ...

    def spend(self, nonce: str, exp: int, now: float) -> bool:
        """Mark the lease redeemed; ``False`` when it was already. Durable when it returns."""
        ...


class MemorySpentLeases:
    """Marks held in the process (kits on the memory store)."""

    def __init__(self) -> None:
        self._spent: set[str] = set()
        self._lock = threading.Lock()

    def is_spent(self, nonce: str, exp: int) -> bool:
        with self._lock:
            return nonce in self._spent

    def spend(self, nonce: str, exp: int, now: float) -> bool:
        with self._lock:
            if nonce in self._spent:
                return False
            self._spent.add(nonce)
            return True


class FileSpentLeases:
    """The marks of one home (see the module docstring). Safe across threads and processes."""

    def __init__(self, home: Path) -> None:
        self.directory = home / SPENT_DIR
        self._pruned = 0.0
        self._lock = threading.Lock()

    def _path(self, nonce: str, exp: int) -> Path:
        return self.directory / f"{exp}-{nonce}"

    def is_spent(self, nonce: str, exp: int) -> bool:
        return self._path(nonce, exp).exists()

    def spend(self, nonce: str, exp: int, now: float) -> bool:
        """Raises ``OSError`` when the mark cannot be made durable (the lease is then not
        redeemed: the caller runs the call normally)."""
        ensure_dir(self.directory)
        try:
            fd = os.open(
                self._path(nonce, exp), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600
            )
        except FileExistsError:
            return False
        try:
            fsync_fd(fd)
        finally:
            os.close(fd)
        fsync_dir(self.directory)
        self._prune(now)
        return True

    def _prune(self, now: float) -> None:
        with self._lock:
            if now - self._pruned < _PRUNE_EVERY:
                return
            self._pruned = now
        horizon = int((now - KEEP_AFTER_EXPIRY) * 1000)
        for path in self.directory.iterdir():
            exp, _, _ = path.name.partition("-")
            if exp.isdigit() and int(exp) < horizon:
                try:
                    path.unlink()
                except FileNotFoundError:
                    continue
