"""The size a checkpoint note states (files under ``checkpoints/`` are replaced with
:func:`~agent_saga._log.files.write_atomic`)."""

from __future__ import annotations

__all__ = ["note_size"]


def note_size(note: str) -> int:
    """The size a checkpoint note states, unverified (only to know which root to compute)."""
    lines = note.split("\n")
    return int(lines[1]) if len(lines) > 1 and lines[1].isdigit() else 0
