"""The size a checkpoint note states (files under ``checkpoints/`` are replaced with
:func:`~agent_saga._log.files.write_atomic`), and where the home's checkpoint key is kept
(named here so that checking a note does not import what writing keys needs)."""

from __future__ import annotations

__all__ = ["KEYS_DIR", "PUBLIC_NAME", "note_size"]

KEYS_DIR = "keys"
PUBLIC_NAME = "checkpoint.pub"


def note_size(note: str) -> int:
    """The size a checkpoint note states, unverified (only to know which root to compute)."""
    lines = note.split("\n")
    return int(lines[1]) if len(lines) > 1 and lines[1].isdigit() else 0
