"""The file-system operations the file store uses, behind one small interface.

The real implementation calls the OS. Tests substitute a simulated file system that keeps
unsynced writes apart and decides, at a simulated power loss, which of them survive, so the
store's durability protocol is exercised by the store's own code.
"""

from __future__ import annotations

import errno
import fcntl
import os
import sys
from pathlib import Path
from typing import Protocol

NETWORK_FS_TYPES = frozenset(
    {"nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "afs", "fuse.sshfs", "fuse.rclone", "lustre"}
)
"""File systems where ``flock``, ``O_APPEND`` or ``fsync`` do not keep the store's protocol."""


class FileSystem(Protocol):
    """What the file store needs from a file system. Paths are strings; handles are ints."""

    def exists(self, path: str) -> bool: ...

    def mkdir(self, path: str) -> None:
        """Create one directory (its parent exists); ``FileExistsError`` if it does."""
        ...

    def open_append(self, path: str) -> int:
        """Open (creating if absent) for reading and appending."""
        ...

    def open_rw(self, path: str) -> int:
        """Open (creating if absent) for reading and writing at explicit offsets."""
        ...

    def write(self, fd: int, data: bytes) -> int:
        """Append; may write fewer bytes than given (the caller loops)."""
        ...

    def pwrite(self, fd: int, data: bytes, offset: int) -> int: ...

    def pread(self, fd: int, size: int, offset: int) -> bytes: ...

    def size(self, fd: int) -> int: ...

    def fsync(self, fd: int) -> None: ...

    def datasync(self, fd: int) -> None:
        """Flush a file's data and what is needed to read it back (its size), not its times.

        As durable as :meth:`fsync` for the bytes written; cheaper where writes change no
        size, since no journal commit is needed for a timestamp alone.
        """
        ...

    def fsync_dir(self, path: str) -> None: ...

    def truncate(self, fd: int, size: int) -> None: ...

    def close(self, fd: int) -> None: ...

    def lock(self, fd: int, *, blocking: bool) -> bool:
        """Take an exclusive ``flock``; with ``blocking=False`` return ``False`` if held."""
        ...

    def unlock(self, fd: int) -> None: ...

    def unlink(self, path: str) -> None: ...

    def listdir(self, path: str) -> list[str]:
        """The names of the entries of directory ``path`` (``[]`` when it does not exist)."""
        ...

    def fs_type(self, path: str) -> str | None:
        """The file-system type holding ``path`` (``ext4``, ``nfs4``, ...), when known."""
        ...


class OsFileSystem:
    """The real file system."""

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def mkdir(self, path: str) -> None:
        os.mkdir(path)

    def open_append(self, path: str) -> int:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)

    def open_rw(self, path: str) -> int:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def write(self, fd: int, data: bytes) -> int:
        return os.write(fd, data)

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        return os.pwrite(fd, data, offset)

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        return os.pread(fd, size, offset)

    def size(self, fd: int) -> int:
        return os.fstat(fd).st_size

    def fsync(self, fd: int) -> None:
        if sys.platform == "darwin" and hasattr(fcntl, "F_FULLFSYNC"):
            fcntl.fcntl(fd, fcntl.F_FULLFSYNC)  # fsync stops at the drive cache on macOS
        else:
            os.fsync(fd)

    def datasync(self, fd: int) -> None:
        if sys.platform == "darwin" and hasattr(fcntl, "F_FULLFSYNC"):
            fcntl.fcntl(fd, fcntl.F_FULLFSYNC)
        elif hasattr(os, "fdatasync"):
            os.fdatasync(fd)
        else:
            os.fsync(fd)

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def truncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def close(self, fd: int) -> None:
        os.close(fd)

    def lock(self, fd: int, *, blocking: bool) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        except OSError as exc:
            if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP):
                raise OSError(exc.errno, "this file system does not support flock") from exc
            raise
        return True

    def unlock(self, fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def listdir(self, path: str) -> list[str]:
        try:
            return os.listdir(path)
        except FileNotFoundError:
            return []

    def fs_type(self, path: str) -> str | None:
        return mount_fs_type(path)


def mount_fs_type(path: str, mountinfo: str = "/proc/self/mountinfo") -> str | None:
    """The type of the file system mounted at the longest mount point containing ``path``."""
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    target = str(Path(path).resolve())
    best, best_type = "", None
    for line in lines:
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5 or not right:
            continue
        mount_point = fields[4].replace("\\040", " ")
        inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) >= len(best):
            best, best_type = mount_point, right.split()[0]
    return best_type
