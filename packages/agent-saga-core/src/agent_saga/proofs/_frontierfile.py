"""Where the background checkpointer resumes: the Merkle frontier of its last checkpoint.

After the checkpointer publishes a checkpoint of ``N`` records of a file log, it stores
``checkpoints/frontier.json``: a :class:`~._resume.ResumePoint` for ``N`` (the signed note, the
frontier at ``N``, record ``N``'s hash with its edge, and the offset where record ``N`` ends),
replacing the previous one (written to a temporary name, fsynced, renamed). The next kit opened
on the home starts its tree there and reads only the records after ``N``, instead of the whole
log.

It is checked exactly as a resume point is (:func:`~._resume.confirm`): the note must verify
with the home's key, the frontier must fold to the note's root and record ``N``'s hash with its
edge to the frontier's last subtree; the offset is not trusted (the records after it must
continue the chain from record ``N``, else the checkpointer reads the whole log). A file that
fails any check is ignored. It is not a ``verify`` resume point (``checkpoints/verified/``):
``verify --since`` never uses it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .._log.files import ensure_dir, write_atomic
from ._checkpoint import Checkpoint
from ._logtree import LogTree
from ._note import NoteVerifier
from ._resume import VERIFIED_DIR, Captured, ResumePoint, confirm, load_point, read_point

FRONTIER_NAME = "frontier.json"


def frontier_path(home: Path) -> Path:
    return home / "checkpoints" / FRONTIER_NAME


def any_start(home: Path) -> bool:
    """Whether ``home`` keeps a frontier or a verify resume point (cheap: no file is read)."""
    return frontier_path(home).exists() or any((home / "checkpoints" / VERIFIED_DIR).glob("*.json"))


def keep_frontier(home: Path, published: Checkpoint, tree: LogTree) -> bool:
    """:func:`save_frontier` of ``tree``'s state, if it stands at ``published`` (a failure to
    write only costs the next open a longer read); returns whether it was stored."""
    size, frontier, edge, last, offset = tree.snapshot()
    if size != published.size:
        return False
    try:
        return save_frontier(home, published, Captured(size, frontier, edge, last, offset))
    except OSError:
        return False


def newest_start(
    home: Path, at_most: int | None, verifiers: Sequence[NoteVerifier]
) -> ResumePoint | None:
    """The newest of the stored frontier and the verify resume points, of at most ``at_most``
    records (any when ``None``), each checked; ``None`` when none holds."""
    limit = at_most if at_most is not None else 1 << 62
    point, _ = load_point(home, limit, verifiers)
    kept = load_frontier(home, limit, verifiers)
    if kept is not None and (point is None or kept.state.size > point.state.size):
        return kept
    return point


def save_frontier(home: Path, checkpoint: Checkpoint, state: Captured) -> bool:
    """Store ``state`` as where the checkpointer resumes, if ``checkpoint`` commits to it;
    returns whether it did (durable when it returns True)."""
    if state.offset < 0 or confirm(checkpoint, state) is not None:
        return False
    path = frontier_path(home)
    ensure_dir(path.parent)
    write_atomic(path, ResumePoint(checkpoint, state).encode())
    return True


def load_frontier(
    home: Path, at_most: int, verifiers: Sequence[NoteVerifier]
) -> ResumePoint | None:
    """The stored frontier of at most ``at_most`` records, checked; ``None`` if there is none
    or it does not check."""
    path = frontier_path(home)
    if not path.exists():
        return None
    point, _ = read_point(path, verifiers)
    if point is None or point.state.size > at_most:
        return None
    return point
