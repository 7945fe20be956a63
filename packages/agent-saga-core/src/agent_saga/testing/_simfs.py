"""A simulated file system for power-loss testing (after SQLite's crash VFS and ALICE).

It keeps, for every file, the *durable* image (what survives a power loss) apart from the *live*
image (what processes read), and the list of writes not yet made durable. ``fsync`` of a file
makes its pending writes durable; ``fsync_dir`` makes pending creations and removals in that
directory durable. :meth:`SimFileSystem.power_loss` resolves every pending operation
independently, as a disk may: written correctly, dropped, garbled or torn (only a prefix
persisted). With ``psow=False`` (no powersafe overwrite) garbling spreads over whole 512-byte
sectors, which may include bytes that were already durable. Files whose directory entry was
never made durable may vanish.
"""

from __future__ import annotations

import errno
import os
import posixpath
import random
from collections.abc import Callable
from dataclasses import dataclass, field

SECTOR = 512


class SimCrash(BaseException):
    """Raised by a :class:`SimFileSystem` operation chosen as the crash point.

    A ``BaseException`` so that ``except Exception`` in the code under test cannot swallow it,
    just as nothing can catch a power cut.
    """


@dataclass
class _File:
    durable: bytearray = field(default_factory=bytearray)
    live: bytearray = field(default_factory=bytearray)
    pending: list[tuple[str, int, bytes]] = field(default_factory=list)
    """``("write", offset, data)`` or ``("truncate", size, b"")``, oldest first."""


@dataclass
class _Handle:
    path: str
    append: bool


class SimFileSystem:
    """An in-memory file system implementing the store's ``FileSystem`` interface.

    Args:
        seed: seeds the choices made at a power loss.
        psow: powersafe overwrite; when false, garbling covers whole sectors.
        crash_after: raise :class:`SimCrash` after this many mutating operations (writes,
            truncates, fsyncs), to enumerate crash points deterministically.
    """

    def __init__(self, seed: int = 0, *, psow: bool = True, crash_after: int | None = None) -> None:
        self.rng = random.Random(seed)  # noqa: S311 - reproducible simulation, not secrecy
        self.psow = psow
        self.crash_after = crash_after
        self.operations = 0
        self.files: dict[str, _File] = {}
        self.dirs: set[str] = {"/"}
        self.durable_names: set[str] = {"/"}
        self._fds: dict[int, _Handle] = {}
        self._next_fd = 3
        self._locks: dict[str, int] = {}
        self.on_operation: Callable[[str], None] | None = None

    # -- bookkeeping ------------------------------------------------------------------------

    def _tick(self, what: str) -> None:
        self.operations += 1
        if self.on_operation is not None:
            self.on_operation(what)
        if self.crash_after is not None and self.operations > self.crash_after:
            raise SimCrash(f"crash before operation {self.operations} ({what})")

    def _handle(self, fd: int) -> _Handle:
        try:
            return self._fds[fd]
        except KeyError:
            raise OSError(errno.EBADF, "bad file descriptor") from None

    def _file(self, fd: int) -> _File:
        return self.files[self._handle(fd).path]

    @staticmethod
    def _norm(path: str) -> str:
        return posixpath.normpath(os.fspath(path))

    # -- FileSystem interface -----------------------------------------------------------------

    def exists(self, path: str) -> bool:
        path = self._norm(path)
        return path in self.files or path in self.dirs

    def mkdir(self, path: str) -> None:
        path = self._norm(path)
        if self.exists(path):
            raise FileExistsError(errno.EEXIST, "exists", path)
        if posixpath.dirname(path) not in self.dirs:
            raise FileNotFoundError(errno.ENOENT, "no parent", path)
        self.dirs.add(path)

    def _open(self, path: str, *, append: bool) -> int:
        path = self._norm(path)
        if path not in self.files:
            if posixpath.dirname(path) not in self.dirs:
                raise FileNotFoundError(errno.ENOENT, "no parent directory", path)
            self.files[path] = _File()
        fd = self._next_fd
        self._next_fd += 1
        self._fds[fd] = _Handle(path, append)
        return fd

    def open_append(self, path: str) -> int:
        return self._open(path, append=True)

    def open_rw(self, path: str) -> int:
        return self._open(path, append=False)

    def write(self, fd: int, data: bytes) -> int:
        file = self._file(fd)
        return self._write_at(file, bytes(data), len(file.live))

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        file = self._file(fd)
        return self._write_at(
            file, bytes(data), len(file.live) if self._handle(fd).append else offset
        )

    def _write_at(self, file: _File, data: bytes, offset: int) -> int:
        self._tick("write")
        _apply_write(file.live, offset, data)
        file.pending.append(("write", offset, data))
        return len(data)

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        return bytes(self._file(fd).live[offset : offset + size])

    def size(self, fd: int) -> int:
        return len(self._file(fd).live)

    def fsync(self, fd: int) -> None:
        file = self._file(fd)
        self._tick("fsync")
        file.durable = bytearray(file.live)
        file.pending.clear()

    def datasync(self, fd: int) -> None:
        """As :meth:`fsync`: this disk keeps no timestamps, and a file's size is its data."""
        self.fsync(fd)

    def fsync_dir(self, path: str) -> None:
        path = self._norm(path)
        self._tick("fsync_dir")
        for name in list(self.files) + list(self.dirs):
            if posixpath.dirname(name) == path:
                self.durable_names.add(name)
        for name in list(self.durable_names):
            if posixpath.dirname(name) == path and not self.exists(name):
                self.durable_names.discard(name)

    def truncate(self, fd: int, size: int) -> None:
        file = self._file(fd)
        self._tick("truncate")
        del file.live[size:]
        file.pending.append(("truncate", size, b""))

    def close(self, fd: int) -> None:
        handle = self._fds.pop(fd, None)
        if handle is not None and self._locks.get(handle.path) == fd:
            del self._locks[handle.path]

    def lock(self, fd: int, *, blocking: bool) -> bool:
        path = self._handle(fd).path
        holder = self._locks.get(path)
        if holder is not None and holder != fd:
            if blocking:
                raise OSError(errno.EDEADLK, "simulated lock held by another handle")
            return False
        self._locks[path] = fd
        return True

    def unlock(self, fd: int) -> None:
        path = self._handle(fd).path
        if self._locks.get(path) == fd:
            del self._locks[path]

    def unlink(self, path: str) -> None:
        path = self._norm(path)
        if path not in self.files:
            raise FileNotFoundError(errno.ENOENT, "no such file", path)
        del self.files[path]

    def listdir(self, path: str) -> list[str]:
        path = self._norm(path)
        names = [*self.files, *self.dirs]
        return sorted(
            posixpath.basename(n) for n in names if n != path and posixpath.dirname(n) == path
        )

    def fs_type(self, path: str) -> str | None:
        return "simfs"

    # -- the power cut ------------------------------------------------------------------------

    def process_crash(self) -> None:
        """The process dies (SIGKILL): its handles and locks are gone, every written byte stays
        (the kernel has it), and pending operations may still reach the disk later."""
        self._fds.clear()
        self._locks.clear()
        self.crash_after = None

    def power_loss(self) -> None:
        """Lose power: resolve every unsynced operation at random; all handles are gone."""
        self._fds.clear()
        self._locks.clear()
        self.crash_after = None
        for path in list(self.files):
            if not self._entry_durable(path) and self.rng.random() < 0.5:
                del self.files[path]
                continue
            file = self.files[path]
            image = bytearray(file.durable)
            for op, offset, data in file.pending:
                self._resolve(image, op, offset, data)
            file.durable, file.live, file.pending = image, bytearray(image), []
        self.dirs = {d for d in self.dirs if self._entry_durable(d) or self.rng.random() < 0.5}
        self.files = {p: f for p, f in self.files.items() if posixpath.dirname(p) in self.dirs}
        self.durable_names = set(self.files) | self.dirs

    def _entry_durable(self, path: str) -> bool:
        while path != "/":
            if path not in self.durable_names:
                return False
            path = posixpath.dirname(path)
        return True

    def _resolve(self, image: bytearray, op: str, offset: int, data: bytes) -> None:
        roll = self.rng.random()
        if op == "truncate":
            if roll < 0.5:
                del image[offset:]
            return
        if roll < 0.3:
            _apply_write(image, offset, data)
        elif roll < 0.6:
            return  # dropped
        elif roll < 0.8:
            self._garble(image, offset, len(data))
        else:
            _apply_write(image, offset, data[: self.rng.randrange(len(data) + 1)])

    def _garble(self, image: bytearray, offset: int, length: int) -> None:
        start, end = offset, offset + length
        if not self.psow:
            start = (start // SECTOR) * SECTOR
            end = -(-end // SECTOR) * SECTOR
        # Half the time the size reached the disk but the data did not (zeros), else noise.
        zeros = self.rng.random() < 0.5
        junk = bytes(end - start) if zeros else self.rng.randbytes(end - start)
        _apply_write(image, start, junk)


def _apply_write(image: bytearray, offset: int, data: bytes) -> None:
    if offset > len(image):
        image.extend(bytes(offset - len(image)))
    image[offset : offset + len(data)] = data
