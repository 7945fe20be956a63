"""The mesh directory: the merged set of origins' branches, on disk.

Layout::

    mesh.json                         marks the directory ({"format": "agent-saga.mesh/1"})
    mesh.lock                         flock: a merge holds it exclusively, readers shared
    origins/<origin id>/              one home-shaped directory per origin: its main branch
        log.jsonl                     the branch's records, byte for byte as the device wrote them
        keys/checkpoint.pub           the origin's verifier key
        checkpoints/latest.note       the signed checkpoint of the whole branch
        checkpoints/seen/<size>-<digest>.note   every other checkpoint of the origin it matches
        forks/<tip>/                  another branch the same key signed (equivocation), same shape
    rejected/                         evidence: the mesh's own content that stopped verifying

Everything under ``origins/`` is a function of the set of branches it holds (the longest branch
is the main one; ties go to the smallest tip hash; file names come from sizes and hashes), so
two merges of the same set write the same bytes. An origin directory is replaced as a whole:
built beside it, then renamed into place, under the exclusive lock.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from ..._errors import ConfigurationError
from ..._log.files import LOG_NAME, OS, ensure_dir, fsync_dir, fsync_fd, write_fully
from .._checkpoint import Checkpoint
from .marker import MARKER, is_mesh
from .origin import LATEST, PUBLIC_KEY, SEEN, Branch

LOCK = "mesh.lock"
ORIGINS = "origins"
FORKS = "forks"
REJECTED = "rejected"
STAGING = ".staging"
FORMAT = "agent-saga.mesh/1"
_CHUNK = 1 << 20


def create_mesh(path: Path) -> None:
    """Make ``path`` a mesh directory (nothing changes when it is one).

    Raises:
        ConfigurationError: ``path`` holds something else (a home, other files).
    """
    if is_mesh(path):
        return
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise ConfigurationError(f"{path} is not empty and not a mesh directory")
    ensure_dir(path)
    write_file(path / MARKER, (json.dumps({"format": FORMAT}) + "\n").encode())


def branch_dirs(mesh: Path) -> list[tuple[Path, str]]:
    """Every home-shaped directory of a mesh, with the origin id its place says it holds: each
    origin's main branch, then its forks."""
    found: list[tuple[Path, str]] = []
    origins = mesh / ORIGINS
    for origin in sorted(origins.iterdir()) if origins.is_dir() else []:
        if not origin.is_dir() or origin.name.startswith("."):
            continue
        found.append((origin, origin.name))
        forks = origin / FORKS
        if forks.is_dir():
            found.extend((p, origin.name) for p in sorted(forks.iterdir()) if p.is_dir())
    return found


@contextmanager
def mesh_lock(mesh: Path, *, exclusive: bool) -> Iterator[None]:
    """Hold the mesh's lock for the block (a reader of a mesh nobody merged into takes none)."""
    path = mesh / LOCK
    if not exclusive and not path.exists():
        yield
        return
    fd = os.open(path, (os.O_RDWR | os.O_CREAT) if exclusive else os.O_RDONLY, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)


def write_file(path: Path, data: bytes, *, sync_dir: bool = True) -> None:
    """Create ``path`` holding ``data``, fsynced (and its directory, with ``sync_dir``)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        write_fully(OS, fd, data)
        fsync_fd(fd)
    finally:
        os.close(fd)
    if sync_dir:
        fsync_dir(path.parent)


def copy_prefix(source: Path, end: int, target: Path) -> None:
    """Copy the first ``end`` bytes of ``source`` to a new file ``target``, fsynced."""
    with source.open("rb") as src:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            left = end
            while left > 0:
                chunk = src.read(min(_CHUNK, left))
                if not chunk:
                    raise OSError(f"{source} ended before {end} bytes")
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view) :]
                left -= len(chunk)
            fsync_fd(fd)
        finally:
            os.close(fd)


def _note_name(checkpoint: Checkpoint) -> str:
    digest = hashlib.sha256(checkpoint.note.encode()).hexdigest()[:16]
    return f"{checkpoint.size:012d}-{digest}.note"


def _matches(branch: Branch, checkpoint: Checkpoint) -> bool:
    return 0 < checkpoint.size <= branch.size and branch.tree.root(checkpoint.size) == (
        checkpoint.root
    )


def _planned_branch(branch: Branch, checkpoints: Sequence[Checkpoint]) -> dict[str, object]:
    """The files of one branch directory: relative path -> bytes, or the branch for its log."""
    mine = sorted({c.note: c for c in checkpoints if _matches(branch, c)}.values(), key=_sort)
    latest = next(c for c in mine if c.size == branch.size)
    files: dict[str, object] = {
        LOG_NAME: branch,
        str(PUBLIC_KEY): (branch.origin.verifier.encode() + "\n").encode(),
        str(LATEST): latest.note.encode(),
    }
    for checkpoint in mine:
        if checkpoint is not latest:
            files[str(SEEN / _note_name(checkpoint))] = checkpoint.note.encode()
    return files


def _sort(checkpoint: Checkpoint) -> tuple[int, str]:
    return checkpoint.size, checkpoint.note


def plan_origin(branches: Sequence[Branch], checkpoints: Sequence[Checkpoint]) -> dict[str, object]:
    """Every file of an origin's directory, for its maximal ``branches`` (main one first)."""
    main, *forks = branches
    files = _planned_branch(main, checkpoints)
    for fork in forks:
        prefix = f"{FORKS}/{fork.tip.hex()[:16]}/"
        for name, content in _planned_branch(fork, checkpoints).items():
            files[prefix + name] = content
    return files


def _same_file(path: Path, content: object) -> bool:
    if isinstance(content, bytes):
        try:
            return path.read_bytes() == content
        except OSError:
            return False
    assert isinstance(content, Branch)
    if path.stat().st_size != content.end:
        return False
    if path.resolve() == content.log.resolve():
        return True
    return _digest(path, content.end) == _digest(content.log, content.end)


def _digest(path: Path, end: int) -> bytes:
    hasher = hashlib.sha256()
    with path.open("rb") as handle:
        left = end
        while left > 0:
            chunk = handle.read(min(_CHUNK, left))
            if not chunk:
                break
            hasher.update(chunk)
            left -= len(chunk)
    return hasher.digest()


def unchanged(directory: Path, files: dict[str, object]) -> bool:
    """Whether ``directory`` already holds exactly ``files``."""
    if not directory.is_dir():
        return False
    present = {str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file()}
    if present != set(files):
        return False
    return all(_same_file(directory / name, content) for name, content in files.items())


def replace_origin(mesh: Path, origin_id: str, files: dict[str, object], *, keep_old: bool) -> None:
    """Make ``origins/<origin_id>`` hold exactly ``files`` (built beside it, renamed in).

    With ``keep_old`` the directory it replaces is kept under ``rejected/`` as evidence.
    """
    fresh = mesh / STAGING / f"{origin_id}.new"
    if fresh.exists():
        shutil.rmtree(fresh)
    directories = {fresh}
    for name, content in sorted(files.items()):
        path = fresh / name
        for parent in path.relative_to(fresh).parents:
            directories.add(fresh / parent)
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            write_file(path, content, sync_dir=False)
        else:
            assert isinstance(content, Branch)
            copy_prefix(content.log, content.end, path)
    for directory in sorted(directories):  # every entry of the new tree, once, before it counts
        fsync_dir(directory)
    retire_origin(mesh, origin_id, keep_old=keep_old)
    ensure_dir(mesh / ORIGINS)
    os.rename(fresh, mesh / ORIGINS / origin_id)
    fsync_dir(mesh / ORIGINS)


def retire_origin(mesh: Path, origin_id: str, *, keep_old: bool) -> None:
    """Take ``origins/<origin_id>`` out of the set: kept under ``rejected/`` or deleted."""
    current = mesh / ORIGINS / origin_id
    if not current.exists():
        return
    if keep_old:
        ensure_dir(mesh / REJECTED)
        number = sum(1 for p in (mesh / REJECTED).iterdir() if p.name.startswith(origin_id))
        os.rename(current, mesh / REJECTED / f"{origin_id}-{number + 1}")
        fsync_dir(mesh / REJECTED)
    else:
        old = mesh / STAGING / f"{origin_id}.old"
        if old.exists():
            shutil.rmtree(old)
        ensure_dir(mesh / STAGING)
        os.rename(current, old)
        shutil.rmtree(old)
    fsync_dir(mesh / ORIGINS)
