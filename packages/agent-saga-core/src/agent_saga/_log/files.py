"""The log's files in the agent-saga home, and the small helpers every file-backed part shares.

Layout of a home: ``log.jsonl`` (the records), ``log.lock`` (held exclusively by a writer for a
batch, or between batches in solo mode; shared by readers), ``log.wait`` (where a process waits
for the lock, seen by a solo writer, see :mod:`.solo`), ``log.synced`` (the
synced watermark), ``owners/`` (one lock per open store), ``leases/`` (recovery claims),
``HALT`` (the kill switch) and ``log.jsonl.broken.<n>`` (bytes discarded by a torn-tail
repair).
"""

from __future__ import annotations

import errno
import hashlib
import os
import threading
from pathlib import Path

from .._errors import ConfigurationError
from .fs import NETWORK_FS_TYPES, FileSystem, OsFileSystem

LOG_NAME = "log.jsonl"
LOCK_NAME = "log.lock"
WATERMARK_NAME = "log.synced"
OWNERS_DIR = "owners"
LEASES_DIR = "leases"
REPAIRED = "store.repaired"
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")
OS = OsFileSystem()
"""The real file system."""


def safe_name(name: str) -> str:
    """A lock-file name component; refuses anything that could leave its directory."""
    if not name or len(name) > 200 or not set(name) <= _NAME_CHARS or name.startswith("."):
        raise ValueError(f"invalid lock name {name!r}")
    return name


def fsync_fd(fd: int) -> None:
    """Flush a file to stable storage (``F_FULLFSYNC`` where ``fsync`` stops at the drive cache)."""
    OS.fsync(fd)


def fsync_dir(path: Path) -> None:
    """Make a directory's entries (a created or renamed file) durable."""
    OS.fsync_dir(str(path))


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` durably: a temporary file beside it (named per process
    and thread) is written and fsynced, renamed over ``path``, and the directory fsynced. A
    reader sees the old content or the new, never a mix."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        write_fully(OS, fd, data)
        fsync_fd(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def ensure_dir(path: Path, fs: FileSystem = OS) -> None:
    """Create ``path`` and missing parents, fsyncing each parent that gained an entry."""
    missing: list[Path] = []
    probe = path
    while not fs.exists(str(probe)):
        missing.append(probe)
        probe = probe.parent
    for directory in reversed(missing):
        try:
            fs.mkdir(str(directory))
        except FileExistsError:
            continue
        fs.fsync_dir(str(directory.parent))


def unlink_planted_links(database: Path) -> None:
    """Make ``database``'s directory, removing symbolic links found where it, the database or
    its SQLite journals belong (derived data, rebuilt from the log): a process that can write
    the home must not make whoever reads it next write another user's files through them. A
    link planted between this check and SQLite's open is not caught."""
    directory = database.parent
    if directory.is_symlink():
        directory.unlink()
    directory.mkdir(exist_ok=True)
    for suffix in ("", "-wal", "-shm", "-journal"):
        planted = Path(f"{database}{suffix}")
        if planted.is_symlink():
            planted.unlink()


def encode_watermark(offset: int) -> bytes:
    check = hashlib.sha256(b"agent-saga watermark %d" % offset).hexdigest()[:16]
    return b"%016x %s\n" % (offset, check.encode())


def decode_watermark(raw: bytes) -> int:
    """The synced length recorded in ``raw``; 0 when unreadable (that only widens repair)."""
    try:
        offset = int(raw[:16], 16)
    except ValueError:
        return 0
    return offset if raw[:34] == encode_watermark(offset)[:34] else 0


def write_fully(fs: FileSystem, fd: int, data: bytes, offset: int | None = None) -> int:
    """Write all of ``data`` (looping over short writes); returns the bytes written."""
    if offset is not None and data:  # one call writes it all, nearly always: no copy first
        done = fs.pwrite(fd, data, offset)
        if done == len(data):
            return done
        if done <= 0:
            raise OSError(errno.EIO, "write made no progress")
    else:
        done = 0
    view = memoryview(data)
    while done < len(data):
        chunk = bytes(view[done:])
        written = fs.write(fd, chunk) if offset is None else fs.pwrite(fd, chunk, offset + done)
        if written <= 0:
            raise OSError(errno.EIO, "write made no progress")
        done += written
    return done


FILE_CRASH_MODEL = {
    "process_crash": (
        "Every record written before the crash is kept, durable records and step outcomes "
        "alike; records of REVERSIBLE steps still buffered in the crashed process are lost "
        "(their effects were local to it). Unfinished sagas are finished by agent-saga recover."
    ),
    "power_loss": (
        "Every record acknowledged as durable is kept: the intent of each COMPENSABLE and "
        "IRREVERSIBLE step, each compensation intent and each terminal record. An outcome "
        "written after its intent may be lost; recovery then probes the tool or escalates. A "
        "torn tail beyond the synced part is repaired, its bytes kept in a .broken file. "
        "Assumes fsync reaches stable storage and the disk has powersafe overwrite."
    ),
    "disk_loss": (
        "Everything: the file store keeps one copy. Replicate the home, or use the PostgreSQL "
        "store on a replicated server, to survive it."
    ),
}


def open_read(fs: FileSystem, path: str) -> int:
    """Open ``path`` for reading only (on an injected file system, its one way of opening)."""
    return os.open(path, os.O_RDONLY | os.O_CLOEXEC) if fs is OS else fs.open_rw(path)


def open_durably(fs: FileSystem, home: Path, name: str) -> int:
    """Open (read-write) ``home/name``; a file created here is fsynced, and so is ``home``."""
    path = str(home / name)
    created = not fs.exists(path)
    fd = fs.open_rw(path)
    if created:
        fs.fsync(fd)
        fs.fsync_dir(str(home))
    return fd


def refuse_network_fs(fs: FileSystem, home: Path) -> None:
    """Raise :class:`ConfigurationError` when ``home`` is on an NFS/SMB-like file system."""
    fs_type = fs.fs_type(str(home))
    if fs_type in NETWORK_FS_TYPES:
        raise ConfigurationError(
            f"{home} is on a {fs_type} file system, where file locks and fsync do not "
            "hold across hosts; put AGENT_SAGA_HOME on a local disk or use the PostgreSQL "
            "store for fleets"
        )


def file_store_traits() -> dict[str, object]:
    """What every file store's ``describe()`` says about itself (a new dict each time)."""
    return {
        "durable": True,
        "survives": ["process crash", "power loss (when fsync reaches stable storage)"],
        "crash_model": dict(FILE_CRASH_MODEL),
        "fsync": "F_FULLFSYNC"
        if os.uname().sysname == "Darwin"
        else "fdatasync for records (written into preallocated space), fsync otherwise",
        "directory_fsync_on_create": True,
        "group_commit": True,
        "multi_process": "flock on log.lock per batch; owner lock per open store",
        "torn_tail_repair": "only beyond the synced watermark, with a .broken copy",
        "assumes": ["powersafe overwrite: appending never garbles synced bytes"],
    }
