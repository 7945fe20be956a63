"""A mesh directory as a read-only log source, so ``sagas`` and ``replay`` read the merged view.

The records come in the merged order (see :mod:`.clock`), each with ``seq`` set to its position
in the view; every origin is checked as it is read. A mesh in which anything does not verify is
refused as a whole, like a corrupt log: the reader is sent to ``agent-saga certify``, which
lists what and why.
"""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path

from ..._errors import CorruptLogError
from ..._log.records import Record
from .marker import is_mesh
from .view import merged_view

__all__ = ["MeshLogSource"]


class MeshLogSource:
    """The merged view of the mesh at ``directory`` (see the module docstring)."""

    kind = "mesh"
    unit = "record"

    def __init__(self, directory: Path, *, key: bytes | None = None) -> None:
        self.directory = directory
        self.where = str(directory)
        self.key = key

    def exists(self) -> bool:
        return is_mesh(self.directory)

    def records(self) -> Generator[Record]:
        """The view's records.

        Raises:
            CorruptLogError: something in the mesh does not verify (the first problem named).
        """
        view = merged_view(self.directory, key=self.key)
        if view.rejected:
            first = view.rejected[0]
            more = f" (and {len(view.rejected) - 1} more)" if len(view.rejected) > 1 else ""
            raise CorruptLogError(
                self.where, 0, f"{first}{more}; run 'agent-saga certify' on the mesh"
            )
        yield from view.renumbered()

    def owner_alive(self, owner_id: str) -> bool:
        """Always true: a device's processes cannot be checked from a merged copy of its log,
        so no saga of it is ever taken for abandoned here."""
        return True

    def close(self) -> None:
        """Nothing to release."""
