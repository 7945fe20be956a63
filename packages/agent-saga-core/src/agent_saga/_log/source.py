"""A log as a read-only source of verified records, for the commands that inspect it.

:class:`LogSource` is what they need from any store: its records, verified while read and
streamed (memory bounded by one record, or one page of rows), and whether an owner recorded in
the log is still alive. :class:`FileLogSource` reads the file store of a home the way opening a
store checks it (the chain, then the synced watermark) without writing anything; the
PostgreSQL source is :class:`agent_saga._postgres.source.PostgresLogSource`.

A record 1 whose hash does not match is most often a key problem, not tampering: a keyed chain
read without its key (or with another one) fails there. Sources raise :class:`ChainKeyError`
for it, which says which of the two it can be.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from pathlib import Path
from typing import Protocol

from .._errors import CorruptLogError
from .chain import HASH_MISMATCH, Chain
from .files import LOG_NAME, OS
from .locks import owner_alive
from .read import iter_log
from .records import Record

__all__ = ["ChainKeyError", "FileLogSource", "LogSource", "explain_first_record"]


class ChainKeyError(CorruptLogError):
    """Record 1 does not verify with the chain key given (or without one).

    Attributes:
        keyed: a chain key was given.
        fits_unkeyed: record 1 verifies without any key (the log is not keyed at all).
    """

    def __init__(self, where: str, *, keyed: bool, fits_unkeyed: bool) -> None:
        super().__init__(where, 0, HASH_MISMATCH, seq=1)
        self.keyed = keyed
        self.fits_unkeyed = fits_unkeyed
        if keyed and fits_unkeyed:
            self.message = f"the log at {where} is not keyed, but a chain key was given"
        elif keyed:
            self.message = (
                f"the chain key does not match the log at {where}: record 1 does not verify with it"
            )
        else:
            self.message = (
                f"record 1 of the log at {where} does not verify without a chain key: the log "
                "was written with one, or record 1 was changed"
            )

    def __str__(self) -> str:
        return self.message


def explain_first_record(
    error: CorruptLogError, where: str, keyed: bool, fits_unkeyed: Callable[[], bool]
) -> CorruptLogError:
    """``error``, or a :class:`ChainKeyError` when it is record 1's hash that does not match.

    ``fits_unkeyed`` is asked only for a keyed chain: whether record 1 verifies without a key.
    """
    if error.seq != 1 or error.reason != HASH_MISMATCH or isinstance(error, ChainKeyError):
        return error
    return ChainKeyError(where, keyed=keyed, fits_unkeyed=keyed and fits_unkeyed())


class LogSource(Protocol):
    """Read-only access to one log (see the module docstring)."""

    kind: str
    where: str
    """The log's location for messages (a path, or a server and schema)."""
    unit: str
    """What a :class:`CorruptLogError`'s ``offset`` counts: ``"byte"`` or ``"record"``."""

    def exists(self) -> bool:
        """Whether there is a log there at all (reading a missing one yields nothing)."""
        ...

    def records(self) -> Generator[Record]:
        """The records, verified while read, streamed in ``seq`` order (close the generator
        when stopping early).

        Raises:
            CorruptLogError: at the first defect (:class:`ChainKeyError` for a key problem).
            StoreFailedError: the store cannot be read.
        """
        ...

    def owner_alive(self, owner_id: str) -> bool:
        """False only when ``owner_id`` is provably gone; never changes anything."""
        ...

    def close(self) -> None:
        """Release what reading holds (a connection); idempotent."""
        ...


class FileLogSource:
    """The file log of a home, read as an opening store checks it, without writing.

    The chain is verified from the first byte and the log must not end before its synced
    watermark (``log.synced``): cutting records from the end is found even when no checkpoint
    covers them. A torn tail beyond the watermark (which opening would repair) is reported as
    a break here: nothing is repaired by reading.
    """

    kind = "file"
    unit = "byte"

    def __init__(self, home: Path, *, key: bytes | None = None) -> None:
        self.home = home
        self.path = home / LOG_NAME
        self.where = str(self.path)
        self.key = key

    def exists(self) -> bool:
        return self.path.is_file()

    def records(self) -> Generator[Record]:
        try:
            for _, record in iter_log(self.path, Chain(self.key), watermark=True):
                yield record
        except CorruptLogError as exc:
            explained = explain_first_record(exc, self.where, self.key is not None, self._plain)
            if explained is exc:
                raise
            raise explained from exc

    def _plain(self) -> bool:
        first = iter_log(self.path, Chain())
        try:
            next(first)
        except (CorruptLogError, StopIteration):
            return False
        finally:
            first.close()
        return True

    def owner_alive(self, owner_id: str) -> bool:
        return owner_alive(OS, self.home, owner_id)

    def close(self) -> None:
        """Nothing to release: each read opens and closes its own descriptors."""
