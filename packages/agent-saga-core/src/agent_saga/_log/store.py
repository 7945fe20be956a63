"""The log store protocol, the shared sealing logic, and the in-memory store."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple, Protocol, runtime_checkable

from .._errors import CorruptLogError, LeaseLostError, StoreFailedError
from .chain import Chain, ChainBreak, check_object
from .records import GENESIS, Entry, Record


class VerifyReport(NamedTuple):
    """The outcome of verifying a log from its first record."""

    ok: bool
    records: int
    """Records that verified before the first break (all of them when ``ok``)."""
    error: CorruptLogError | None = None
    last_hash: str = GENESIS


@runtime_checkable
class LogStore(Protocol):
    """An append-only, hash-chained record log.

    Contract every implementation keeps:

    * ``append`` seals the entries (assigns ``seq``, ``prev``, ``hash``) and writes them in one
      batch, in order, with consecutive ``seq`` numbers continuing across restarts.
    * When ``append(..., sync=True)`` or ``sync()`` returns, every record appended before the call
      is as durable as the store can make it (see :meth:`describe`). If either raises, nothing
      from that call may be assumed durable and the store refuses further appends.
    * ``records`` and ``verify`` read what is stored now, not a cached copy.
    * ``owner_id`` names this open store; sagas record it, and :meth:`owner_alive` tells another
      process whether that owner is provably gone (so its unfinished sagas may be recovered).
    * :meth:`lease` gives at most one holder at a time a named, exclusive lease.
    """

    kind: str
    owner_id: str

    def append(self, entries: Sequence[Entry], *, sync: bool) -> list[Record]: ...

    def sync(self) -> None: ...

    def records(self) -> Iterator[Record]: ...

    def verify(self) -> VerifyReport: ...

    def health(self) -> list[str]:
        """Problems that make the store unfit to log an effect right now (empty when fit)."""
        ...

    def describe(self) -> dict[str, object]:
        """Facts about durability for the guarantees manifest, computed from the configuration."""
        ...

    def owner_alive(self, owner_id: str) -> bool:
        """False only when ``owner_id`` is provably gone (lock released, lease expired)."""
        ...

    def lease(self, name: str, *, ttl: float) -> Lease | None:
        """Take the exclusive lease ``name`` for up to ``ttl`` seconds, or ``None`` if held."""
        ...

    def close(self) -> None: ...


class Lease(Protocol):
    """An exclusive claim; released explicitly, by expiry, or when its holder dies.

    Work done under a lease writes through it: :meth:`append` is fenced, so a holder whose lease
    expired or was taken over by another holder writes nothing, and :meth:`renew` keeps a lease
    that expires by time alive while its holder works.
    """

    name: str

    def release(self) -> None: ...

    def renew(self, ttl: float) -> bool:
        """Extend the lease to ``ttl`` seconds from now; False once it is lost (not revived)."""
        ...

    def append(self, entries: Sequence[Entry], *, sync: bool) -> list[Record]:
        """Append to the store the lease was taken from, only while the lease is held.

        The check and the write are one step: no other holder can have taken the lease over
        between them.

        Raises:
            LeaseLostError: the lease was released, expired or taken over; nothing was written.
            StoreFailedError: as the store's own ``append``.
        """
        ...


Append = Callable[..., list[Record]]
"""A store's ``append(entries, *, sync)``."""


class InProcessLease:
    """A lease among the holders of one in-process set of names (memory and sink stores).

    It never expires: it is held until released, so the holder's writes need no other fence.
    """

    def __init__(self, name: str, held: set[str], lock: threading.Lock, write: Append) -> None:
        self.name = name
        self._held = held
        self._lock = lock
        self._write: Append | None = write

    def release(self) -> None:
        with self._lock:
            if self._write is not None:
                self._held.discard(self.name)
                self._write = None

    def renew(self, ttl: float) -> bool:
        return self._write is not None

    def append(self, entries: Sequence[Entry], *, sync: bool) -> list[Record]:
        write = self._write
        if write is None:
            raise LeaseLostError(f"lease {self.name!r} was released; nothing was written")
        return write(entries, sync=sync)


MEMORY_CRASH_MODEL = {
    "process_crash": "Nothing: the memory store lives and dies with its process.",
    "power_loss": "Nothing: the memory store lives and dies with its process.",
    "disk_loss": "Nothing was on disk.",
}


class MemoryLogStore:
    """A hash-chained log held in memory; nothing survives the process.

    For tests and throwaway runs only: it must be asked for by name, never picked by default.
    """

    kind = "memory"

    def __init__(self, *, key: bytes | None = None) -> None:
        self._chain = Chain(key)
        self._records: list[Record] = []
        self._lock = threading.Lock()
        self._closed = False
        self.owner_id = f"mem-{os.getpid()}-{os.urandom(6).hex()}"
        self._leases: set[str] = set()

    def owner_alive(self, owner_id: str) -> bool:
        return owner_id == self.owner_id and not self._closed

    def lease(self, name: str, *, ttl: float) -> Lease | None:
        with self._lock:
            if name in self._leases:
                return None
            self._leases.add(name)
        return InProcessLease(name, self._leases, self._lock, self.append)

    def append(self, entries: Sequence[Entry], *, sync: bool) -> list[Record]:
        with self._lock:
            if self._closed:
                raise StoreFailedError("memory store is closed")
            prev = self._records[-1].hash if self._records else GENESIS
            seq = len(self._records) + 1
            out: list[Record] = []
            for entry in entries:
                record, _ = self._chain.seal(entry, seq, prev)
                out.append(record)
                prev, seq = record.hash, seq + 1
            self._records.extend(out)
            return out

    def sync(self) -> None:
        if self._closed:
            raise StoreFailedError("memory store is closed")

    def records(self) -> Iterator[Record]:
        with self._lock:
            return iter(list(self._records))

    def verify(self) -> VerifyReport:
        with self._lock:
            snapshot = list(self._records)
        return verify_objects(self._chain, (r.to_json() for r in snapshot), "memory")

    def health(self) -> list[str]:
        return ["memory store is closed"] if self._closed else []

    def describe(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "durable": False,
            "survives": [],
            "crash_model": MEMORY_CRASH_MODEL,
            "keyed_chain": self._chain.keyed,
        }

    def close(self) -> None:
        self._closed = True

    def tamper(self, index: int, record: Record) -> None:
        """Replace a stored record (tests use this to show that verification notices)."""
        with self._lock:
            self._records[index] = record


def verify_objects(chain: Chain, objects: Iterator[dict[str, object]], where: str) -> VerifyReport:
    """Verify decoded record objects in order; offsets in errors are record indexes."""
    prev, count = GENESIS, 0
    for index, obj in enumerate(objects):
        result = check_object(chain, dict(obj), index + 1, prev)
        if isinstance(result, ChainBreak):
            error = CorruptLogError(where, index, result.reason, seq=index + 1)
            return VerifyReport(False, count, error, prev)
        prev, count = result.hash, count + 1
    return VerifyReport(True, count, None, prev)
