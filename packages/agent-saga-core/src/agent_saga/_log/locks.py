"""Process-lifetime locks in the agent-saga home: owner locks and recovery leases.

Both are exclusive ``flock`` locks on small files, so the kernel releases them the moment their
holder dies, however it dies. That is how one process proves another is gone.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from .._errors import LeaseLostError
from .files import LEASES_DIR, OWNERS_DIR, ensure_dir, safe_name
from .fs import FileSystem
from .records import Entry, Record
from .store import Append


def hold_owner_lock(fs: FileSystem, home: Path, owner_id: str) -> int:
    """Create ``owners/<owner_id>.lock`` and hold it; returns the descriptor to keep open."""
    owners = home / OWNERS_DIR
    ensure_dir(owners, fs)
    fd = fs.open_rw(str(owners / f"{owner_id}.lock"))
    fs.lock(fd, blocking=False)
    return fd


def owner_alive(fs: FileSystem, home: Path, owner_id: str) -> bool:
    """False when ``owner_id``'s lock file is gone or its lock can be taken (owner dead)."""
    try:
        path = str(home / OWNERS_DIR / f"{safe_name(owner_id)}.lock")
    except ValueError:
        return False
    if not fs.exists(path):
        return False
    fd = fs.open_rw(path)
    try:
        if not fs.lock(fd, blocking=False):
            return True
        fs.unlock(fd)
    finally:
        fs.close(fd)
    return False


def take_lease(fs: FileSystem, home: Path, name: str, write: Append) -> FileLease | None:
    """Lock ``leases/<name>.lock`` exclusively, or ``None`` when another holder has it.

    ``write`` is the store's ``append``, which the lease's own :meth:`FileLease.append` calls.
    """
    leases = home / LEASES_DIR
    ensure_dir(leases, fs)
    try:
        file_name = safe_name(name)
    except ValueError:  # any other name still gets its own lock file
        file_name = "h-" + hashlib.sha256(name.encode()).hexdigest()[:40]
    fd = fs.open_rw(str(leases / f"{file_name}.lock"))
    if not fs.lock(fd, blocking=False):
        fs.close(fd)
        return None
    return FileLease(name, fd, fs, write)


class FileLease:
    """A held lease on the file store; released explicitly or when the process dies.

    A ``flock`` has no expiry and no other process can take it while this one lives, so the
    lease is held exactly until :meth:`release`: writing through it needs no other fence.
    """

    def __init__(self, name: str, fd: int, fs: FileSystem, write: Append) -> None:
        self.name = name
        self._fd: int | None = fd
        self._fs = fs
        self._write = write

    def release(self) -> None:
        if self._fd is not None:
            self._fs.unlock(self._fd)
            self._fs.close(self._fd)
            self._fd = None

    def renew(self, ttl: float) -> bool:
        """True while held: a held ``flock`` does not expire."""
        return self._fd is not None

    def append(self, entries: Sequence[Entry], *, sync: bool) -> list[Record]:
        """The store's ``append`` while the lease is held.

        Raises:
            LeaseLostError: the lease was released; nothing was written.
        """
        if self._fd is None:
            raise LeaseLostError(f"lease {self.name!r} was released; nothing was written")
        return self._write(entries, sync=sync)
