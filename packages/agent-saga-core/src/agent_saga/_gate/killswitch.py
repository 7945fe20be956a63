"""The global kill switch: a file in the agent-saga home, read before every effect.

Reading is fail-closed: if the switch's state cannot be read (permission denied, unparsable
content, an I/O error), the answer is "halted".
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import NamedTuple, Protocol

from .._log.files import ensure_dir, fsync_dir, fsync_fd

HALT_FILE = "HALT"


class HaltState(NamedTuple):
    """The switch's state as last read."""

    halted: bool
    reason: str = ""
    since: float | None = None
    readable: bool = True


_NOT_HALTED = HaltState(halted=False)


class KillSwitch(Protocol):
    """A process-independent halt flag."""

    def state(self) -> HaltState: ...

    def halt(self, reason: str, *, at: float) -> None: ...

    def resume(self) -> None: ...

    def describe(self) -> dict[str, object]: ...


class FileKillSwitch:
    """Halted while ``<home>/HALT`` exists. Written atomically (temp file, fsync, rename)."""

    def __init__(self, home: str | os.PathLike[str]) -> None:
        self.home = Path(home)
        self.path = self.home / HALT_FILE
        self._path = str(self.path)

    def state(self) -> HaltState:
        """Read the switch now (a ``stat`` when not halted; the file's content when halted)."""
        try:
            os.stat(self._path)
        except FileNotFoundError:
            return _NOT_HALTED
        except OSError as exc:
            return HaltState(True, f"kill switch unreadable: {exc}", readable=False)
        try:
            with open(self._path, "rb") as handle:
                raw = handle.read(64 * 1024)
        except FileNotFoundError:  # resumed between the two calls
            return _NOT_HALTED
        except OSError as exc:
            return HaltState(True, f"kill switch unreadable: {exc}", readable=False)
        try:
            info = json.loads(raw)
            reason, since = str(info["reason"]), float(info["since"])
        except (ValueError, KeyError, TypeError):
            return HaltState(True, "halted (kill switch file is not in the expected format)")
        return HaltState(True, reason, since)

    def halt(self, reason: str, *, at: float) -> None:
        ensure_dir(self.home)
        tmp = self.path.with_name(f".{HALT_FILE}.{os.getpid()}.tmp")
        payload = json.dumps({"reason": reason, "since": at, "pid": os.getpid()}).encode()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, payload)
            fsync_fd(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        fsync_dir(self.home)

    def resume(self) -> None:
        try:
            self.path.unlink()
        except FileNotFoundError:
            return
        fsync_dir(self.home)

    def describe(self) -> dict[str, object]:
        return {
            "kind": "file",
            "path": str(self.path),
            "checked": "before every effect",
            "fail_closed": True,
        }


class MemoryKillSwitch:
    """An in-process switch for tests."""

    def __init__(self) -> None:
        self._state = HaltState(halted=False)
        self._lock = threading.Lock()

    def state(self) -> HaltState:
        return self._state

    def halt(self, reason: str, *, at: float) -> None:
        with self._lock:
            self._state = HaltState(True, reason, at)

    def resume(self) -> None:
        with self._lock:
            self._state = HaltState(halted=False)

    def describe(self) -> dict[str, object]:
        return {"kind": "memory", "checked": "before every effect", "fail_closed": True}
