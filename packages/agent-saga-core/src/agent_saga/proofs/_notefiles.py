"""Small helpers for the files under ``checkpoints/``: atomic durable replacement, and the size
a checkpoint note states."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from .._log.files import OS as _OS
from .._log.files import fsync_dir, fsync_fd, write_fully

__all__ = ["note_size", "write_atomic"]


def note_size(note: str) -> int:
    """The size a checkpoint note states, unverified (only to know which root to compute)."""
    lines = note.split("\n")
    return int(lines[1]) if len(lines) > 1 and lines[1].isdigit() else 0


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` durably (temporary file fsynced, renamed, directory
    fsynced)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        write_fully(_OS, fd, text.encode())
        fsync_fd(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)
