"""The durable file store: one JSON-lines log under the agent-saga home.

Durability protocol (what is true when a call returns):

* The home directory and the log file are created durably: the file is fsynced and so is the
  directory that gained an entry, before the first record is acknowledged.
* ``append(..., sync=True)`` and ``sync()`` return only after ``fsync`` (``F_FULLFSYNC`` on
  macOS) of the log file has returned for every byte appended so far. Concurrent callers share
  one fsync (group commit).
* Appends from several processes sharing a home are serialized by an exclusive ``flock`` on the
  sidecar ``log.lock``, held for the whole batch; the chain is continued from the current tail,
  which is re-read when another process has appended.
* A failed write or fsync puts the store in a failed state: nothing from that call is
  acknowledged and every later append raises :class:`StoreFailedError` until the log is reopened
  (and so re-verified from disk).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from ._chain import MAX_RECORD_BYTES, Chain, ChainBreak, parse_line
from ._errors import CorruptLogError, StoreFailedError
from ._records import GENESIS, Entry, Record
from ._store import VerifyReport

LOG_NAME = "log.jsonl"
LOCK_NAME = "log.lock"
OWNERS_DIR = "owners"
LEASES_DIR = "leases"
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_.")


def _safe_name(name: str) -> str:
    """A lock-file name component; refuses anything that could leave its directory."""
    if not name or len(name) > 200 or not set(name) <= _NAME_CHARS or name.startswith("."):
        raise ValueError(f"invalid lock name {name!r}")
    return name


def fsync_fd(fd: int) -> None:
    """Flush a file to stable storage (``F_FULLFSYNC`` where ``fsync`` stops at the drive cache)."""
    if sys.platform == "darwin" and hasattr(fcntl, "F_FULLFSYNC"):
        fcntl.fcntl(fd, fcntl.F_FULLFSYNC)
    else:
        os.fsync(fd)


def fsync_dir(path: Path) -> None:
    """Make a directory's entries (a created or renamed file) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def ensure_dir(path: Path) -> None:
    """Create ``path`` and missing parents, fsyncing each parent that gained an entry."""
    missing: list[Path] = []
    probe = path
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    for directory in reversed(missing):
        try:
            directory.mkdir()
        except FileExistsError:
            continue
        fsync_dir(directory.parent)


def iter_log(path: Path, chain: Chain) -> Iterator[tuple[int, Record]]:
    """Yield ``(offset, record)`` for each record of the log file at ``path``, verifying the chain.

    Memory stays bounded by :data:`MAX_RECORD_BYTES` whatever the file holds.

    Raises:
        CorruptLogError: at the first record that is incomplete, malformed or off the chain.
    """
    prev, seq, offset = GENESIS, 1, 0
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        return
    with handle:
        while True:
            line = handle.readline(MAX_RECORD_BYTES + 1)
            if not line:
                return
            if not line.endswith(b"\n"):
                reason = (
                    f"record longer than {MAX_RECORD_BYTES} bytes"
                    if len(line) > MAX_RECORD_BYTES
                    else "incomplete final record (no newline)"
                )
                raise CorruptLogError(str(path), offset, reason, seq=seq)
            result = parse_line(chain, line[:-1], seq, prev)
            if isinstance(result, ChainBreak):
                raise CorruptLogError(str(path), offset, result.reason, seq=seq)
            yield offset, result
            prev, seq, offset = result.hash, seq + 1, offset + len(line)


class FileLogStore:
    """A durable, hash-chained log in ``<home>/log.jsonl``.

    Opening the store verifies the whole chain; a damaged log raises :class:`CorruptLogError`
    naming the byte offset of the first bad record.
    """

    kind = "file"

    def __init__(self, home: str | os.PathLike[str], *, key: bytes | None = None) -> None:
        self.home = Path(home)
        self.path = self.home / LOG_NAME
        self._chain = Chain(key)
        ensure_dir(self.home)
        created = not self.path.exists()
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        self._lock_fd = os.open(self.home / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        if created:
            fsync_fd(self._fd)
            fsync_dir(self.home)
        self.owner_id = f"{os.getpid()}-{os.urandom(6).hex()}"
        self._owner_fd = self._hold_owner_lock()
        self._lock = threading.Lock()
        self._sync_cond = threading.Condition()
        self._failed: BaseException | None = None
        self._closed = False
        self._seq, self._prev, self._end = 0, GENESIS, 0
        with self._flocked():
            self._catch_up()
        self._written = self._synced = self._end
        self._syncing = False

    # -- writing ---------------------------------------------------------------------------

    def append(self, entries: Sequence[Entry], *, sync: bool) -> list[Record]:
        """Seal and write ``entries`` as one batch; with ``sync``, return only once durable."""
        with self._lock:
            self._check_usable()
            with self._flocked():
                self._catch_up()
                out: list[Record] = []
                lines: list[bytes] = []
                seq, prev = self._seq, self._prev
                for entry in entries:
                    seq += 1
                    record, line = self._chain.seal(entry, seq, prev)
                    out.append(record)
                    lines.append(line)
                    prev = record.hash
                self._write_all(b"".join(lines))
                self._seq, self._prev = seq, prev
                self._written = self._end
        if sync:
            self._sync_to(self._written)
        return out

    def sync(self) -> None:
        """Make every record appended so far durable."""
        self._check_usable()
        self._sync_to(self._written)

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                written = os.write(self._fd, view)
                if written <= 0:
                    raise OSError(errno.EIO, "write returned no progress")
                view = view[written:]
                self._end += written
        except OSError as exc:
            self._fail(exc)
            raise StoreFailedError(f"write to {self.path} failed: {exc}") from exc

    def _sync_to(self, target: int) -> None:
        with self._sync_cond:
            while self._synced < target:
                if self._failed is not None:
                    raise StoreFailedError(f"{self.path}: store failed: {self._failed}")
                if self._syncing:
                    self._sync_cond.wait()
                    continue
                self._syncing = True
                upto = self._written
                self._sync_cond.release()
                try:
                    fsync_fd(self._fd)
                except OSError as exc:
                    self._fail(exc)
                finally:
                    self._sync_cond.acquire()
                    self._syncing = False
                    self._sync_cond.notify_all()
                if self._failed is None:
                    self._synced = max(self._synced, upto)
            if self._failed is not None:
                raise StoreFailedError(f"{self.path}: store failed: {self._failed}")

    def _fail(self, exc: BaseException) -> None:
        if self._failed is None:
            self._failed = exc

    def _check_usable(self) -> None:
        if self._closed:
            raise StoreFailedError(f"{self.path}: store is closed")
        if self._failed is not None:
            raise StoreFailedError(
                f"{self.path}: store failed ({self._failed}); reopen it to re-verify from disk"
            )

    # -- the tail shared with other processes ------------------------------------------------

    def _flocked(self) -> _FLock:
        return _FLock(self._lock_fd)

    def _catch_up(self) -> None:
        """Continue the chain from the current end of file (another process may have appended)."""
        size = os.fstat(self._fd).st_size
        if size == self._end:
            return
        if size < self._end:
            raise CorruptLogError(
                str(self.path), size, f"log shrank from {self._end} bytes while open"
            )
        with self.path.open("rb") as handle:
            handle.seek(self._end)
            offset, seq, prev = self._end, self._seq + 1, self._prev
            while offset < size:
                line = handle.readline(MAX_RECORD_BYTES + 1)
                if not line.endswith(b"\n"):
                    raise CorruptLogError(
                        str(self.path), offset, "incomplete final record (no newline)", seq=seq
                    )
                result = parse_line(self._chain, line[:-1], seq, prev)
                if isinstance(result, ChainBreak):
                    raise CorruptLogError(str(self.path), offset, result.reason, seq=seq)
                prev, seq, offset = result.hash, seq + 1, offset + len(line)
        self._seq, self._prev, self._end = seq - 1, prev, offset

    # -- reading ------------------------------------------------------------------------------

    def records(self) -> Iterator[Record]:
        """The records now on disk, verified while read (raises :class:`CorruptLogError`)."""
        return (record for _, record in iter_log(self.path, self._chain))

    def verify(self) -> VerifyReport:
        """Re-read and re-verify the whole file from disk."""
        return verify_file(self.path, self._chain)

    def health(self) -> list[str]:
        problems: list[str] = []
        if self._closed:
            problems.append("log store is closed")
        if self._failed is not None:
            problems.append(f"log store failed: {self._failed}")
        try:
            size = os.fstat(self._fd).st_size if not self._closed else 0
            if not self._closed and size < self._end:
                problems.append(f"log file shrank to {size} bytes (had {self._end})")
            if not os.access(self.path, os.W_OK):
                problems.append(f"log file {self.path} is not writable")
        except OSError as exc:
            problems.append(f"log file cannot be inspected: {exc}")
        return problems

    def describe(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "path": str(self.path),
            "durable": True,
            "survives": ["process crash", "power loss (fsync reaches stable storage)"],
            "fsync": "F_FULLFSYNC" if sys.platform == "darwin" else "fsync",
            "directory_fsync_on_create": True,
            "group_commit": True,
            "multi_process": "flock on log.lock per batch",
            "keyed_chain": self._chain.keyed,
        }

    # -- owners and leases ------------------------------------------------------------------

    def _hold_owner_lock(self) -> int:
        """Create ``owners/<owner_id>.lock`` and hold an exclusive flock on it until close.

        The kernel drops the lock when this process dies, however it dies, which is how another
        process tells a dead owner from a live one.
        """
        owners = self.home / OWNERS_DIR
        ensure_dir(owners)
        fd = os.open(owners / f"{self.owner_id}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd

    def owner_alive(self, owner_id: str) -> bool:
        """False when ``owner_id``'s lock file is gone or its lock can be taken (owner dead)."""
        if owner_id == self.owner_id:
            return not self._closed
        try:
            path = self.home / OWNERS_DIR / f"{_safe_name(owner_id)}.lock"
        except ValueError:
            return False
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    def lease(self, name: str, *, ttl: float) -> _FileLease | None:
        """An exclusive flock on ``leases/<name>.lock``, held until released or this process dies.

        ``ttl`` is not needed here: the kernel releases the lock of a dead holder at once.
        """
        leases = self.home / LEASES_DIR
        ensure_dir(leases)
        fd = os.open(
            leases / f"{_safe_name(name)}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600
        )
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return _FileLease(name, fd)

    def close(self) -> None:
        """Sync what was written, then release the file and the owner lock. Idempotent."""
        if self._closed:
            return
        try:
            if self._failed is None and self._synced < self._written:
                self._sync_to(self._written)
        finally:
            self._closed = True
            os.close(self._fd)
            os.close(self._lock_fd)
            with contextlib.suppress(OSError):
                (self.home / OWNERS_DIR / f"{self.owner_id}.lock").unlink()
            os.close(self._owner_fd)

    def __enter__(self) -> FileLogStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _FileLease:
    def __init__(self, name: str, fd: int) -> None:
        self.name = name
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


class _FLock:
    def __init__(self, fd: int) -> None:
        self._fd = fd

    def __enter__(self) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)


def verify_file(path: Path, chain: Chain | None = None) -> VerifyReport:
    """Verify the log file at ``path`` from its first byte; never raises on bad content."""
    chain = chain or Chain()
    count, last = 0, GENESIS
    try:
        for _, record in iter_log(path, chain):
            count, last = count + 1, record.hash
    except CorruptLogError as exc:
        return VerifyReport(False, count, exc, last)
    except OSError as exc:
        return VerifyReport(False, count, CorruptLogError(str(path), 0, f"unreadable: {exc}"), last)
    return VerifyReport(True, count, None, last)
