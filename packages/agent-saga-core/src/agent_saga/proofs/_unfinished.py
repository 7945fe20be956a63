"""The unfinished sagas a checkpoint signs (:mod:`agent_saga._log.unfinishedset`): the
statement read back for the saga index's readers, and counted again for the checkpointer (or
a streaming pass) when it resumed after a prefix of the log.

Invariants:

* A statement is taken only from a checkpoint whose signature the home's public key
  (``keys/checkpoint.pub``) verifies, or the caller's verified one; anything else (no key, no
  checkpoint, a bad signature, a checkpoint without the line) gives ``None``, after which
  readers walk the whole log.
* What is signed comes from the log: the index's set at an earlier signed statement is used
  only once it matches that statement, and the log's records after it are folded in; when
  they disagree the whole log is walked (or, for a streaming pass, read from its first record).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from .._errors import CorruptLogError
from .._log.chain import Chain
from .._log.indexpoint import IndexMismatch
from .._log.indexsets import unfinished_through
from .._log.sagaindex import SagaIndex
from .._log.store import LogStore
from .._log.unfinishedset import Statement, extension_line, statement_of
from ._checkpoint import Checkpoint, CheckpointError, open_checkpoint
from ._logtree import LogTree
from ._note import NoteError, NoteVerifier
from ._notefiles import KEYS_DIR, PUBLIC_NAME
from ._resume import ResumePoint

__all__ = ["LatestStatement", "recount", "signed_head", "signed_set", "statement_lines"]


class LatestStatement:
    """Called by the saga index's readers: the statement of the home's latest checkpoint
    (``note``), verified with the home's public key as it is now; the signature of each
    note is checked once per process and key (a key replaced since is used from then on)."""

    def __init__(self, home: Path, note: Path) -> None:
        self.home, self.note = home, note
        self._seen: tuple[str, str, Statement | None] | None = None

    def __call__(self) -> Statement | None:
        try:  # the public key as ``home_verifier`` reads it, without what writing keys needs
            note = self.note.read_text(encoding="utf-8")
            key = (self.home / KEYS_DIR / PUBLIC_NAME).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None
        seen = self._seen
        if seen is not None and seen[:2] == (note, key):
            return seen[2]
        try:
            checkpoint = open_checkpoint(note, [NoteVerifier.parse(key)])
        except (NoteError, CheckpointError):
            checkpoint = None
        found = None if checkpoint is None else statement_of(checkpoint.size, checkpoint.extensions)
        self._seen = (note, key, found)
        return found


def recount(
    store: LogStore, size: int, latest: Callable[[], Checkpoint | None]
) -> list[str] | None:
    """The sagas begun and not ended in the first ``size`` records of ``store``'s file log:
    its saga index's set at the statement of ``latest()`` (the latest checkpoint, verified)
    checked against it, then the log after it; the whole log walked when they disagree.
    ``None`` for a store without a saga index, or when the log cannot be read."""
    index = getattr(store, "saga_index", None)
    if not isinstance(index, SagaIndex):
        return None
    try:
        checkpoint = latest()
    except CheckpointError:
        checkpoint = None
    statement = None
    if checkpoint is not None and checkpoint.size <= size:
        statement = statement_of(checkpoint.size, checkpoint.extensions)
    try:
        index.refresh()
        try:
            return unfinished_through(index, statement, size)
        except IndexMismatch:
            return unfinished_through(index, None, size)
    except (CorruptLogError, IndexMismatch, OSError, sqlite3.Error):
        return None


def signed_head(
    tree: LogTree, latest: Callable[[], Checkpoint | None]
) -> tuple[int, bytes, tuple[str, ...]]:
    """``(size, root, extension lines)`` of ``tree``'s head, taken together: the lines hold
    the statement of the unfinished sagas at ``size`` (none when they cannot be counted; see
    :func:`recount` for ``latest``)."""
    size, root, ids = tree.head(lambda at: recount(tree.store, at, latest))
    return size, root, statement_lines(ids)


def signed_set(home: Path, key: bytes | None) -> Callable[[ResumePoint], list[str] | None]:
    """For a pass resuming at a point of ``home``'s file log (chain key ``key``): the sagas
    unfinished at the point, as its checkpoint (verified when the point was loaded) states
    them. The ids come from the home's saga index, caught up with the log, and are returned
    only when their count and digest are the statement's; ``None`` when the checkpoint has
    no statement, the index disagrees with it, or the index cannot be read."""

    def at(point: ResumePoint) -> list[str] | None:
        checkpoint = point.checkpoint
        statement = statement_of(checkpoint.size, checkpoint.extensions)
        if statement is None:
            return None
        index = SagaIndex(home, Chain(key))
        try:
            index.refresh()
            return unfinished_through(index, statement, statement.size)
        except (CorruptLogError, IndexMismatch, OSError, sqlite3.Error):
            return None
        finally:
            index.close()

    return at


def statement_lines(ids: list[str] | None) -> tuple[str, ...]:
    """The extension lines of a checkpoint whose unfinished sagas are ``ids`` (none when
    they are not known)."""
    return () if ids is None else (extension_line(ids),)
