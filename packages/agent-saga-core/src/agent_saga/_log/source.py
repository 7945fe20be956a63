"""A log as a read-only source of verified records, for the commands that inspect it.

:class:`LogSource` is what they need from any store: its records, verified while read and
streamed (memory bounded by one record, or one page of rows), and whether an owner recorded in
the log is still alive. :class:`FileLogSource` reads the file store of a home the way opening a
store checks it (the chain, then the synced watermark) without writing anything; the
PostgreSQL source is :class:`agent_saga._postgres.source.PostgresLogSource`.

A record 1 whose hash does not match is most often a key problem, not tampering: a keyed chain
read without its key (or with another one) fails there. Sources raise :class:`ChainKeyError`
for it, which says which of the two it can be; but when the key given verifies record 2 on top
of record 1's stored hash, the key is right and record 1 itself was changed: that is reported
as the break it is.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable
from pathlib import Path
from typing import Protocol

from .._errors import CorruptLogError
from .chain import (
    _HASH_FIELD,
    HASH_MISMATCH,
    MAX_RECORD_BYTES,
    Chain,
    ChainBreak,
    Masked,
    check_line_fast,
)
from .files import LOG_NAME, OS
from .locks import owner_alive
from .read import iter_log
from .records import Record

__all__ = [
    "ChainKeyError",
    "FileLogSource",
    "KeyedSource",
    "LogSource",
    "explain_first_record",
]


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


class KeyedSource(Protocol):
    """What telling a key problem from a changed record 1 needs of a source."""

    where: str
    key: bytes | None

    def fits_unkeyed(self) -> bool:
        """Whether record 1 verifies without any chain key."""
        ...

    def first_lines(self) -> list[bytes]:
        """The first two stored lines of the log (fewer when it is shorter)."""
        ...


def explain_first_record(error: CorruptLogError, source: KeyedSource) -> CorruptLogError:
    """``error``, or a :class:`ChainKeyError` when it is record 1's hash that does not match
    because of the key (see :func:`key_fits_after_first` for a changed record 1)."""
    if error.seq != 1 or error.reason != HASH_MISMATCH or isinstance(error, ChainKeyError):
        return error
    if key_fits_after_first(source.first_lines(), Chain(source.key)):
        return error  # the key is right: record 1 was changed
    keyed = source.key is not None
    return ChainKeyError(source.where, keyed=keyed, fits_unkeyed=keyed and source.fits_unkeyed())


def key_fits_after_first(lines: Iterable[bytes], chain: Chain) -> bool:
    """Whether ``chain`` verifies record 2 on top of record 1's *stored* hash: then its key is
    the log's, and a record 1 that does not verify was changed after it was written."""
    found = iter(lines)
    first, second = next(found, None), next(found, None)
    if first is None or second is None:
        return False
    cut = first.rfind(_HASH_FIELD)
    if cut < 0:
        return False
    start = cut + len(_HASH_FIELD)
    stored = first[start : start + 64]
    result = check_line_fast(chain, second.rstrip(b"\n"), 2, stored)
    return not isinstance(result, ChainBreak | Masked)


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
            explained = explain_first_record(exc, self)
            if explained is exc:
                raise
            raise explained from exc

    def first_lines(self) -> list[bytes]:
        with self.path.open("rb") as handle:
            return [handle.readline(MAX_RECORD_BYTES + 1) for _ in range(2)]

    def fits_unkeyed(self) -> bool:
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
