"""The merged view of a mesh directory: every origin's records, checked, in one order.

Reading a mesh checks it again from its bytes (each branch's chain, its checkpoints, its
origin's key); a branch that no longer verifies contributes only what still does, and the rest
is reported. The view holds, per origin, the records its maximal branches agree on (for an
origin that signed two histories, their common prefix), ordered by :mod:`.clock`'s rule.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from ..._log.records import Record
from .._note import NoteVerifier
from .clock import MeshRecord, hlc_order
from .layout import ORIGINS, branch_dirs, mesh_lock
from .merge import maximal_branches, require_mesh
from .origin import Branch, Rejection, check_branch

__all__ = ["Fork", "MeshView", "merged_view"]


@dataclass(frozen=True)
class Fork:
    """An origin that signed two histories: they agree on the first ``common`` records."""

    origin: str
    origin_id: str
    common: int
    sizes: tuple[int, ...]


@dataclass(frozen=True)
class MeshView:
    """A mesh directory's records in the merged order, with what did not verify."""

    directory: Path
    records: tuple[MeshRecord, ...]
    origins: dict[str, str] = field(default_factory=dict)
    """origin id -> origin name, for every origin with records in the view."""
    sizes: dict[str, int] = field(default_factory=dict)
    """origin id -> records of that origin in the view."""
    forks: tuple[Fork, ...] = ()
    rejected: tuple[Rejection, ...] = ()

    def tips(self) -> dict[str, tuple[int, str]]:
        """origin id -> ``(seq, hash)`` of the last record of each origin in the view."""
        tips: dict[str, tuple[int, str]] = {}
        for item in self.records:
            seq = item.record.seq
            if seq >= tips.get(item.origin_id, (0, ""))[0]:
                tips[item.origin_id] = (seq, item.record.hash)
        return tips

    def renumbered(self) -> list[Record]:
        """The records with ``seq`` replaced by their position in the view (from 1), for
        readers that group and show records (``sagas``, ``replay``)."""
        return [m.record._replace(seq=i) for i, m in enumerate(self.records, 1)]


def merged_view(
    directory: str | os.PathLike[str],
    *,
    key: bytes | None = None,
    trusted: Collection[NoteVerifier] | None = None,
) -> MeshView:
    """Read and check the mesh at ``directory`` and order its records (see :mod:`.clock`).

    Raises:
        ConfigurationError: ``directory`` is not a mesh directory.
    """
    mesh = Path(directory)
    require_mesh(mesh)
    offered: dict[str, list[Branch]] = {}
    rejected: list[Rejection] = []
    with mesh_lock(mesh, exclusive=False):
        for branch_dir, origin_id in branch_dirs(mesh):
            is_main = branch_dir.parent.name == ORIGINS
            branch, refused = check_branch(
                branch_dir,
                str(branch_dir),
                key=key,
                trusted=trusted,
                keep_records=is_main,
                expect=origin_id,
            )
            rejected.extend(refused)
            if branch is not None:
                offered.setdefault(branch.origin.id, []).append(branch)
    chains: dict[str, tuple[str, list[Record]]] = {}
    forks: list[Fork] = []
    for origin_id, found in sorted(offered.items()):
        branches = maximal_branches(found)
        main = next((b for b in branches if b.records), None)
        if main is None:  # only a fork verified: its records were not kept, read them now
            main, _ = check_branch(branches[0].log.parent, "", key=key, keep_records=True)
            if main is None:
                continue
        common = min((main.common_prefix(b) for b in branches if b is not main), default=None)
        if common is not None:
            forks.append(Fork(main.origin.name, origin_id, common, tuple(b.size for b in branches)))
        records = list(main.records[: main.size if common is None else common])
        chains[origin_id] = (main.origin.name, records)
    ordered = hlc_order(chains)
    return MeshView(
        mesh,
        tuple(ordered),
        {origin_id: name for origin_id, (name, _) in chains.items()},
        {origin_id: len(records) for origin_id, (_, records) in chains.items()},
        tuple(forks),
        tuple(rejected),
    )
