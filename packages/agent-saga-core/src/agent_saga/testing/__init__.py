"""Test doubles for code that uses agent-saga: a ledger witness, a fake clock, deterministic ids.

Import from here in tests; nothing in this module is used by the engine itself.
"""

from __future__ import annotations

import contextlib
import io
import ipaddress
import os
import re
import socket
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from .._clock import FakeClock, SequentialIds
from .._gate.killswitch import MemoryKillSwitch
from .._log.fs import OsFileSystem
from .._log.store import MemoryLogStore
from ._simfs import SimCrash, SimFileSystem


@dataclass(frozen=True, slots=True)
class LedgerEvent:
    action: str
    key: str


class Ledger:
    """A fake external system that records every effect with its idempotency key.

    It is the witness of "charged once, refunded once": tools and compensators call
    :meth:`record`; tests read :meth:`count` and :meth:`actions`. Thread-safe.
    """

    def __init__(self) -> None:
        self._events: list[LedgerEvent] = []
        self._counts: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def record(self, action: str, key: str = "") -> None:
        with self._lock:
            self._events.append(LedgerEvent(action, key))
            self._counts[(action, key)] += 1

    def count(self, action: str, key: str | None = None) -> int:
        """How often ``action`` happened (for ``key`` only, when given)."""
        with self._lock:
            if key is not None:
                return self._counts[(action, key)]
            return sum(n for (name, _), n in self._counts.items() if name == action)

    def actions(self) -> list[str]:
        """Actions in the order they happened."""
        with self._lock:
            return [event.action for event in self._events]

    def events(self) -> list[LedgerEvent]:
        with self._lock:
            return list(self._events)

    def duplicates(self) -> list[tuple[str, str]]:
        """``(action, key)`` pairs that happened more than once."""
        with self._lock:
            return sorted(pair for pair, n in self._counts.items() if n > 1 and pair[1])


class FaultyFileSystem(OsFileSystem):
    """The real file system with injectable faults, and a record of every fsync.

    Args:
        fail_fsync_at: the n-th ``fsync`` (1-based, counted from construction) raises
            ``OSError(errno_)``; every later one too, as a broken disk would.
        fail_write_at: the n-th ``write`` or ``pwrite`` raises ``OSError(errno_)``.
        short_writes: every ``write`` and ``pwrite`` writes at most half of what it is given.
    """

    def __init__(
        self,
        *,
        fail_fsync_at: int | None = None,
        fail_write_at: int | None = None,
        short_writes: bool = False,
        errno_: int = 5,
    ) -> None:
        self.fail_fsync_at = fail_fsync_at
        self.fail_write_at = fail_write_at
        self.short_writes = short_writes
        self.errno = errno_
        self.fsyncs: list[tuple[int, int]] = []
        """``(fd, file size at the fsync)`` for every fsync that succeeded."""
        self.fsync_calls = 0
        self.write_calls = 0

    def fsync(self, fd: int) -> None:
        self._sync(fd, super().fsync)

    def datasync(self, fd: int) -> None:
        """Counted, failed and recorded as an ``fsync`` is."""
        self._sync(fd, super().datasync)

    def _sync(self, fd: int, flush: Callable[[int], None]) -> None:
        self.fsync_calls += 1
        if self.fail_fsync_at is not None and self.fsync_calls >= self.fail_fsync_at:
            raise OSError(self.errno, "injected fsync failure")
        flush(fd)
        self.fsyncs.append((fd, self.size(fd)))

    def _before_write(self, data: bytes) -> bytes:
        self.write_calls += 1
        if self.fail_write_at is not None and self.write_calls >= self.fail_write_at:
            raise OSError(self.errno, "injected write failure")
        if self.short_writes and len(data) > 1:
            return data[: len(data) // 2]
        return data

    def write(self, fd: int, data: bytes) -> int:
        return super().write(fd, self._before_write(data))

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        return super().pwrite(fd, self._before_write(data), offset)

    def synced_size(self, fd: int) -> int:
        """The largest size of ``fd``'s file covered by a successful fsync."""
        return max((size for f, size in self.fsyncs if f == fd), default=0)


class NetworkRefused(AssertionError):
    """A test tried to reach a host other than this machine."""


def _loopback(host: object) -> bool:
    if not isinstance(host, str):
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


@contextmanager
def loopback_only() -> Iterator[list[str]]:
    """Within this block, any connection or name lookup beyond 127.0.0.1 / ::1 fails.

    Yields the list of refused destinations, so a test can assert nothing was attempted even
    where the code under test swallowed the error (SDKs that retry and log). Unix sockets are
    allowed.
    """
    refused: list[str] = []
    connect, connect_ex = socket.socket.connect, socket.socket.connect_ex
    getaddrinfo = socket.getaddrinfo

    def check(address: Any) -> None:
        if isinstance(address, tuple) and not _loopback(address[0]):
            refused.append(str(address[0]))
            raise NetworkRefused(f"test tried to connect to {address[0]!r}")

    def guarded_connect(self: Any, address: Any) -> None:
        check(address)
        connect(self, address)

    def guarded_connect_ex(self: Any, address: Any) -> int:
        check(address)
        return connect_ex(self, address)

    def guarded_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host is not None and not _loopback(host if isinstance(host, str) else str(host)):
            refused.append(str(host))
            raise NetworkRefused(f"test tried to resolve {host!r}")
        return getaddrinfo(host, *args, **kwargs)

    socket.socket.connect = guarded_connect  # type: ignore[method-assign]
    socket.socket.connect_ex = guarded_connect_ex  # type: ignore[method-assign]
    socket.getaddrinfo = guarded_getaddrinfo
    try:
        yield refused
    finally:
        socket.socket.connect, socket.socket.connect_ex = connect, connect_ex  # type: ignore[method-assign]
        socket.getaddrinfo = getaddrinfo


_BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.DOTALL)


def run_markdown_examples(path: str | os.PathLike[str]) -> int:
    """Run every ```python block of a Markdown file in order, in one namespace.

    A python block directly followed by a ```text block must print exactly that text. Returns
    the number of python blocks run; raises ``AssertionError`` on a mismatch (and whatever a
    block raises).
    """
    text = Path(path).read_text(encoding="utf-8")
    blocks = _BLOCK.findall(text)
    namespace: dict[str, object] = {"__name__": "readme"}
    count = 0
    for index, (lang, body) in enumerate(blocks):
        if lang != "python":
            continue
        following = blocks[index + 1] if index + 1 < len(blocks) else None
        buffer = io.StringIO()
        # dont_inherit: the block runs as a user's file would, without this module's
        # ``from __future__ import annotations`` (frameworks read evaluated annotations).
        code = compile(body, str(path), "exec", dont_inherit=True)
        with contextlib.redirect_stdout(buffer):
            exec(code, namespace)  # noqa: S102 - the docs' own code
        if following is not None and following[0] == "text":
            assert buffer.getvalue() == following[1], f"{path}: block {count + 1} printed " + repr(
                buffer.getvalue()
            )
        count += 1
    return count


def modules_after_import(name: str) -> set[str]:
    """Top-level module names a fresh interpreter holds after ``import name`` (and nothing else).

    Shows which frameworks importing a package pulls in.
    """
    code = f"import sys, {name}; print(*sorted({{m.partition('.')[0] for m in sys.modules}}))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return set(result.stdout.split())


def installed_from(module: ModuleType, distribution: str) -> bool:
    """True when ``module`` was loaded from a file that ``distribution`` installed.

    A module put into ``sys.modules`` by hand (a fake) has no such file.
    """
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import distribution as find_distribution

    origin = getattr(module, "__file__", None)
    if origin is None:
        return False
    try:
        files = find_distribution(distribution).files or []
    except PackageNotFoundError:
        return False
    target = Path(origin).resolve()
    return any(Path(str(f.locate())).resolve() == target for f in files)


__all__ = [
    "FakeClock",
    "Ledger",
    "LedgerEvent",
    "MemoryKillSwitch",
    "MemoryLogStore",
    "NetworkRefused",
    "SequentialIds",
    "SimCrash",
    "SimFileSystem",
    "installed_from",
    "loopback_only",
    "modules_after_import",
    "run_markdown_examples",
]
