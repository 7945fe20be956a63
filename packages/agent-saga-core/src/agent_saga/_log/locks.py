"""Process-lifetime locks in the agent-saga home: owner locks and recovery leases.

Both are exclusive ``flock`` locks on small files, so the kernel releases them the moment their
holder dies, however it dies. That is how one process proves another is gone.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from .files import LEASES_DIR, OWNERS_DIR, ensure_dir, safe_name
from .fs import FileSystem


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


def take_lease(fs: FileSystem, home: Path, name: str) -> FileLease | None:
    """Lock ``leases/<name>.lock`` exclusively, or ``None`` when another holder has it."""
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
    return FileLease(name, fd, fs)


class FileLease:
    """A held lease on the file store; released explicitly or when the process dies."""

    def __init__(self, name: str, fd: int, fs: FileSystem) -> None:
        self.name = name
        self._fd: int | None = fd
        self._fs = fs

    def release(self) -> None:
        if self._fd is not None:
            self._fs.unlock(self._fd)
            self._fs.close(self._fd)
            self._fd = None
