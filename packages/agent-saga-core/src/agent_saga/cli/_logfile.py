"""Read-only access to the configured log, for the commands that only look.

The log is the file store in the home, or the fleet log on PostgreSQL when the configuration
names one (``store``, ``$AGENT_SAGA_STORE``); a keyed chain is read with the key from
``--chain-key-file``, ``$AGENT_SAGA_CHAIN_KEY_FILE`` or ``chain_key_file``.

Invariants: nothing here creates the home or the log, and nothing opens the log for writing; the
only file a read may write is the saga index beside a file log (``index/``, derived data, see
:mod:`agent_saga._log.sagaindex`). Reads of a file log hold a shared ``flock`` on the writers'
``log.lock`` (when it exists) so they never see a batch half-written by a live agent: writers
hold it exclusively while they append. psycopg is imported only when the store is PostgreSQL.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from .._config import is_postgres_url
from .._errors import CorruptLogError
from .._history.build import History, build_history
from .._log.chain import HASH_MISMATCH, Chain
from .._log.files import LOCK_NAME, LOG_NAME
from .._log.read import shorter_than_synced, verify_file
from .._log.sagaindex import IndexMismatch, SagaIndex
from .._log.solo import waiting_room
from .._log.source import ChainKeyError, FileLogSource, LogSource
from .._log.store import VerifyReport
from ..proofs._mesh.marker import is_mesh
from ._errors import BadInputError, CliError
from ._settings import KEY_SOURCES, Settings

T = TypeVar("T")
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
        with waiting_room(home):  # a writer alone on the home lets go of the lock when seen
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


def is_fleet(settings: Settings) -> bool:
    """Whether the configured store is PostgreSQL (fleet mode)."""
    return is_postgres_url(settings.store())


def require_store(settings: Settings) -> None:
    """For commands that open a kit: a usage error when the home has no file log (a fleet's
    log is on its server, which opening reaches or reports)."""
    if not is_fleet(settings):
        require_log(settings.home)


def log_source(settings: Settings) -> LogSource:
    """The configured log, read-only (see the module docstring).

    Raises:
        BadInputError: there is no log there (no file, or no table in the schema).
        ConfigurationError: the chain key file cannot be read, or psycopg is missing.
        StoreFailedError: the server cannot be reached.
    """
    key = settings.chain_key()
    if is_mesh(settings.home):  # a merged log of offline devices
        from ..proofs._mesh.source import MeshLogSource

        return MeshLogSource(settings.home, key=key)
    store = settings.store()
    if is_postgres_url(store):
        from .._postgres.source import PostgresLogSource  # psycopg only for a fleet

        source = PostgresLogSource(str(store), key=key, schema=settings.store_schema())
        if not source.exists():
            source.close()
            raise BadInputError(
                f"no agent-saga log at {source.where} (check store and store_schema)"
            )
        return source
    require_log(settings.home)
    return FileLogSource(settings.home, key=key)


@contextmanager
def reading(settings: Settings, *, hold_lock: bool = False) -> Iterator[LogSource]:
    """The configured log for the block; a fleet log's connection closed afterwards.

    Each read of a file log finds its end (and its synced watermark) under the readers' shared
    lock, briefly, and reads the records before that end without it, so agents appending
    meanwhile are not held up by a long read. ``hold_lock`` keeps the shared lock for the whole
    block instead (writers wait).
    """
    source = log_source(settings)
    try:
        if hold_lock and isinstance(source, FileLogSource):
            with shared_lock(settings.home):
                yield source
        else:
            yield source
    finally:
        source.close()


def read_history(settings: Settings) -> tuple[History, str]:
    """Read, verify and interpret the whole configured log; with where it is, for messages.

    Raises:
        CliError: no log (usage), or the log is corrupt or unreadable (failure); the message
            names the position of the first bad record, or says the chain key is wrong.
    """
    with reading(settings) as source:
        try:
            return build_history(source.records()), source.where
        except ChainKeyError:
            raise  # the command group explains it with the key's source
        except CorruptLogError as exc:
            raise CliError(f"{exc}; run 'agent-saga verify'") from exc
        except OSError as exc:
            raise CliError(f"cannot read {source.where}: {exc}") from exc


def verify_log(home: Path, key: bytes | None = None) -> VerifyReport:
    """Verify the file log of ``home`` from its first byte, without opening it for writing."""
    path = require_log(home)
    with shared_lock(home):
        return verify_file(path, Chain(key))


def key_problem(settings: Settings, error: CorruptLogError) -> str | None:
    """The one-line explanation when ``error`` comes from a wrong or missing chain key.

    A store refuses a keyed log opened without its key (or an unkeyed one opened with a key)
    where the first hash does not match; reading record 1 tells a key problem apart.
    """
    if not isinstance(error, ChainKeyError):
        if HASH_MISMATCH not in error.reason:
            return None
        try:
            with reading(settings) as source:
                first = source.records()
                try:
                    next(first, None)
                finally:
                    first.close()
        except ChainKeyError as exc:
            error = exc
        except Exception:
            return None
        if not isinstance(error, ChainKeyError):
            return None
    where = settings.key_file()
    if error.keyed and error.fits_unkeyed:
        return f"{error}: remove the chain key ({where}) or use the log it belongs to"
    if error.keyed:
        return f"the chain key in {where} does not match the log at {error.path}: " + (
            "record 1 does not verify with it"
        )
    return f"{error}; give the log's key with {KEY_SOURCES}"


def through_index(settings: Settings, answer: Callable[[SagaIndex], T]) -> T | None:
    """``answer`` from the saga index of the home's file log, or ``None`` when the index cannot
    give it: a fleet or merged log, a home the index cannot be written in, a log the index
    does not describe even once rebuilt, or a log that is damaged or shorter than its synced
    watermark where the index reads it. The caller then reads the whole log, which reports
    what is wrong. Errors about the question (an unknown saga id) propagate.
    """
    home = settings.home
    if is_fleet(settings) or is_mesh(home) or not os.access(home, os.W_OK):
        return None
    path = require_log(home)
    index = SagaIndex(home, Chain(settings.chain_key()))
    try:
        if shorter_than_synced(path):
            return None
        return answer(index)
    except (IndexMismatch, CorruptLogError, sqlite3.Error, OSError):
        return None
    finally:
        index.close()
