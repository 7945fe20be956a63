"""What makes a directory a mesh directory: its marker file.

Kept apart from :mod:`.layout` (which reads origins' branches) so that a command asking only
"is this home a mesh?" imports nothing else.
"""

from __future__ import annotations

from pathlib import Path

MARKER = "mesh.json"


def is_mesh(path: Path) -> bool:
    """Whether ``path`` is a mesh directory."""
    return (path / MARKER).is_file()


__all__ = ["MARKER", "is_mesh"]
