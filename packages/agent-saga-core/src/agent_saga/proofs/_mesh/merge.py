"""Merging origins' logs: a grow-only set of records keyed by ``(origin, seq)``.

The state of a mesh directory is, per origin, the set of its *maximal branches*: chains of
records from the origin's first record, each covered by a checkpoint the origin signed, none a
prefix of another. Merging takes every branch of every input (the mesh's own content included,
so it is re-checked each time), keeps per origin those that no other branch extends, and writes
them with every checkpoint of the origin that matches them. Because a record's hash commits to
every record before it, two branches that share their record ``n`` share every record up to
``n``: the union of branches is the union of their records, and the result depends on the set of
inputs only. So merging commutes, associates and is idempotent, and every origin's chain and
checkpoints verify in the result as they did at the device.

An origin with two maximal branches signed two histories (equivocation, a cloned device or a
rewritten log): both are kept, never one silently chosen, and certify reports it.

Inputs are device homes (their log is copied under the readers' shared lock, after their latest
checkpoint was read, so the copy holds at least what the checkpoint covers) or other mesh
directories. Nothing in an input is written to.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..._errors import ConfigurationError
from ..._log.files import LOCK_NAME, LOG_NAME, ensure_dir
from ..._log.solo import take_log_lock
from .._checkpoint import Checkpoint
from .._note import NoteVerifier
from .layout import (
    ORIGINS,
    STAGING,
    branch_dirs,
    create_mesh,
    mesh_lock,
    plan_origin,
    replace_origin,
    retire_origin,
    unchanged,
)
from .marker import is_mesh
from .origin import Branch, Rejection, check_branch, read_notes

__all__ = ["MergeReport", "OriginSummary", "maximal_branches", "merge_logs"]


@dataclass(frozen=True)
class OriginSummary:
    """One origin after a merge: its records (main branch) and its other branches."""

    name: str
    id: str
    records: int
    forks: tuple[int, ...] = ()
    """Sizes of the other branches the origin signed (equivocation), if any."""


@dataclass(frozen=True)
class MergeReport:
    """What a merge left in the mesh directory and what it refused."""

    into: Path
    origins: tuple[OriginSummary, ...]
    added: int
    """Records the mesh holds now that it did not hold before (main branches)."""
    rejected: tuple[Rejection, ...]

    @property
    def ok(self) -> bool:
        """Nothing was refused."""
        return not self.rejected


def maximal_branches(branches: Sequence[Branch]) -> list[Branch]:
    """The branches no other one extends; the longest (then the smallest tip hash) first."""
    kept: list[Branch] = []
    for branch in sorted(branches, key=lambda b: (-b.size, b.tip)):
        if not any(k.extends(branch) for k in kept):
            kept.append(branch)
    return kept


@contextmanager
def _shared_log_lock(home: Path) -> Iterator[None]:
    """A device's readers' lock, so its log is not copied in the middle of a batch."""
    try:
        fd = os.open(home / LOCK_NAME, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        yield
        return
    try:
        take_log_lock(fd, home, shared=True)  # asks a solo writer to let go
        yield
    finally:
        os.close(fd)


class _Collector:
    """Checks every branch offered and keeps what counts, per origin."""

    def __init__(self, staging: Path, key: bytes | None, trusted: Collection[NoteVerifier] | None):
        self.staging = staging
        self.key = key
        self.trusted = trusted
        self.branches: dict[str, list[Branch]] = {}
        self.checkpoints: dict[str, list[Checkpoint]] = {}
        self.rejected: list[Rejection] = []
        self.own_rejected: set[str] = set()
        self._copies = 0

    def check(self, directory: Path, source: str, *, copy: bool, expect: str | None = None) -> None:
        log = directory / LOG_NAME
        notes = read_notes(directory)  # before the log: what they cover is in the copy
        if copy and log.is_file():
            self._copies += 1
            target = self.staging / f"copy-{self._copies}.jsonl"
            with _shared_log_lock(directory):
                shutil.copyfile(log, target)
            log = target
        branch, refused = check_branch(
            directory,
            source,
            log=log,
            notes=notes,
            key=self.key,
            trusted=self.trusted,
            expect=expect,
        )
        self.rejected.extend(refused)
        if branch is None:
            return
        self.branches.setdefault(branch.origin.id, []).append(branch)
        self.checkpoints.setdefault(branch.origin.id, []).extend(branch.checkpoints)


def merge_logs(
    into: str | os.PathLike[str],
    sources: Sequence[str | os.PathLike[str]],
    *,
    key: bytes | None = None,
    trusted: Collection[NoteVerifier] | None = None,
) -> MergeReport:
    """Merge the logs of ``sources`` (device homes or mesh directories) into the mesh ``into``.

    The mesh is created if missing; its own content is checked again and takes part in the
    merge like any input. Records that do not verify (their chain, their checkpoint, their
    origin's key, or a key not in ``trusted`` when that is given) are left out and listed in the
    report with the reason; an origin of the mesh whose content stopped verifying is moved to
    ``rejected/`` as evidence and rebuilt from what still verifies.

    Durable on return: every file written was fsynced, and each origin directory was replaced in
    one rename. A failure midway leaves every origin either as it was or as merged.

    Raises:
        ConfigurationError: ``into`` exists and is not a mesh directory.
    """
    target = Path(into)
    create_mesh(target)
    with mesh_lock(target, exclusive=True):
        staging = target / STAGING
        if staging.exists():
            shutil.rmtree(staging)
        ensure_dir(staging)
        try:
            return _merge_locked(target, [Path(s) for s in sources], staging, key, trusted)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def _merge_locked(
    target: Path,
    sources: list[Path],
    staging: Path,
    key: bytes | None,
    trusted: Collection[NoteVerifier] | None,
) -> MergeReport:
    collector = _Collector(staging, key, trusted)
    before: dict[str, int] = {}
    for directory, origin_id in branch_dirs(target):
        refused = len(collector.rejected)
        collector.check(directory, str(directory), copy=False, expect=origin_id)
        if len(collector.rejected) > refused:
            collector.own_rejected.add(origin_id)
        if directory.parent.name == ORIGINS:
            before[origin_id] = _size_of(collector, origin_id)
    for source in sources:
        _offer(collector, source, target)
    summaries = []
    added = 0
    origins = target / ORIGINS
    present = {d.name for d in origins.iterdir()} if origins.is_dir() else set()
    for origin_id in sorted(present - set(collector.branches)):
        retire_origin(target, origin_id, keep_old=True)  # nothing of it verifies any more
    for origin_id, offered in sorted(collector.branches.items()):
        branches = maximal_branches(offered)
        files = plan_origin(branches, collector.checkpoints[origin_id])
        directory = target / ORIGINS / origin_id
        if origin_id in collector.own_rejected or not unchanged(directory, files):
            keep = origin_id in collector.own_rejected
            replace_origin(target, origin_id, files, keep_old=keep)
        main = branches[0]
        added += max(0, main.size - before.get(origin_id, 0))
        forks = tuple(b.size for b in branches[1:])
        summaries.append(OriginSummary(main.origin.name, origin_id, main.size, forks))
    return MergeReport(target, tuple(summaries), added, tuple(collector.rejected))


def _size_of(collector: _Collector, origin_id: str) -> int:
    return max((b.size for b in collector.branches.get(origin_id, [])), default=0)


def _offer(collector: _Collector, source: Path, target: Path) -> None:
    """Check every branch ``source`` holds (a home, or a mesh directory)."""
    if source.resolve() == target.resolve():
        return  # the mesh's own content is checked already
    if is_mesh(source):
        with mesh_lock(source, exclusive=False):
            for directory, origin_id in branch_dirs(source):
                collector.check(directory, str(directory), copy=True, expect=origin_id)
        return
    if (source / LOG_NAME).is_file():
        collector.check(source, str(source), copy=True)
        return
    what = "no such directory" if not source.exists() else "neither a home nor a mesh directory"
    collector.rejected.append(Rejection(str(source), None, "every record", what))


def require_mesh(path: Path) -> None:
    """Raise unless ``path`` is a mesh directory."""
    if not is_mesh(path):
        raise ConfigurationError(f"{path} is not a mesh directory (made by 'agent-saga merge')")
