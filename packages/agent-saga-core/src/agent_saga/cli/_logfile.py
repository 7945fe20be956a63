"""Read-only access to a home's log, for the commands that only look.

Invariants: nothing here creates the home, the log or any other file, and nothing opens the log
for writing. Reads hold a shared ``flock`` on the writers' ``log.lock`` (when it exists) so they
never see a batch half-written by a live agent: writers hold it exclusively while they append.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .._errors import CorruptLogError
from .._history.build import History, build_history
from .._log.chain import Chain
from .._log.files import LOCK_NAME, LOG_NAME
from .._log.read import iter_log, verify_file
from .._log.store import VerifyReport
from ._errors import BadInputError, CliError

LOCK_TIMEOUT = 10.0
"""Seconds a reader waits for a writer's batch before giving up."""


def log_path(home: Path) -> Path:
    """Where the file store of ``home`` keeps its log."""
    return home / LOG_NAME


def require_home(home: Path) -> None:
    """Raise a usage error unless ``home`` is an existing directory."""
    if not home.is_dir():
        raise BadInputError(f"no agent-saga home at {home} (check --home or AGENT_SAGA_HOME)")


def require_log(home: Path) -> Path:
    """The log's path; a usage error when there is none (nothing is created)."""
    path = log_path(home)
    if not path.is_file():
        raise BadInputError(f"no log at {path} (check --home or AGENT_SAGA_HOME)")
    return path


@contextmanager
def shared_lock(home: Path, timeout: float = LOCK_TIMEOUT) -> Iterator[None]:
    """Hold a shared lock on ``home``'s ``log.lock`` (if there is one) for the block.

    Raises:
        CliError: a writer kept the lock for longer than ``timeout`` seconds.
    """
    try:
        fd = os.open(home / LOCK_NAME, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        yield  # no writer has ever opened this log: nobody to wait for
        return
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise CliError(
                        f"{home / LOCK_NAME} has been held by a writer for over {timeout:g}s"
                    ) from None
                time.sleep(0.01)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def read_history(home: Path) -> History:
    """Read, verify and interpret the whole log of ``home``.

    Raises:
        CliError: no log (usage), or the log is corrupt or unreadable (failure); the message
            names the offset of the first bad record.
    """
    path = require_log(home)
    try:
        with shared_lock(home):
            return build_history(record for _, record in iter_log(path, Chain()))
    except CorruptLogError as exc:
        raise CliError(f"{exc}; run 'agent-saga verify'") from exc
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc}") from exc


def verify_log(home: Path) -> VerifyReport:
    """Verify the log of ``home`` from its first byte, without opening it for writing."""
    path = require_log(home)
    with shared_lock(home):
        return verify_file(path)
