"""Putting the log on an async append store (an edge database, a key/value service).

:class:`AsyncSink` is the small protocol such a store implements: append encoded records in
order, and read them back. :class:`SinkLogStore` adapts any sink to the :class:`LogStore`
contract: it seals records into the same hash chain as the file store, runs the sink's
coroutines on a private event loop thread (so the engine's synchronous calls work from sync and
async code alike), and on open reads the sink back, verifies it, and continues ``seq`` and the
chain from its tail, so a restart never reads as tampering.

Two sinks ship: :class:`MemorySink` (for tests) and :class:`SqliteSink` (a file-backed SQLite
table in WAL mode with ``synchronous=FULL``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import threading
from collections.abc import Coroutine, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

from .._errors import CorruptLogError, StoreFailedError
from .chain import Chain, ChainBreak, parse_line
from .records import GENESIS, Entry, Record
from .store import MEMORY_CRASH_MODEL, InProcessLease, Lease, VerifyReport

T = TypeVar("T")


@runtime_checkable
class AsyncSink(Protocol):
    """An append-only store of encoded records, reached asynchronously."""

    async def append(self, lines: Sequence[bytes]) -> None:
        """Store ``lines`` after the existing ones, in order; durable when this returns."""
        ...

    async def read(self, start: int) -> list[bytes]:
        """The stored lines from position ``start`` (0-based) on, in order."""
        ...

    async def close(self) -> None: ...

    def describe(self) -> dict[str, object]: ...


class MemorySink:
    """A sink in memory; survives a :class:`SinkLogStore` restart, not the process."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []

    async def append(self, lines: Sequence[bytes]) -> None:
        self.lines.extend(lines)

    async def read(self, start: int) -> list[bytes]:
        return self.lines[start:]

    async def close(self) -> None:
        return None

    def describe(self) -> dict[str, object]:
        return {"sink": "memory", "durable": False}


class SqliteSink:
    """A SQLite table of records (WAL mode, ``synchronous=FULL``: a commit survives power loss)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._db: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            db.execute("CREATE TABLE IF NOT EXISTS records (pos INTEGER PRIMARY KEY, line BLOB)")
            self._db = db
        return self._db

    def _append(self, lines: Sequence[bytes]) -> None:
        with self._lock:
            db = self._connect()
            db.execute("BEGIN IMMEDIATE")
            try:
                (count,) = db.execute("SELECT COUNT(*) FROM records").fetchone()
                db.executemany(
                    "INSERT INTO records (pos, line) VALUES (?, ?)",
                    [(count + i, line) for i, line in enumerate(lines)],
                )
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def _read(self, start: int) -> list[bytes]:
        with self._lock:
            rows = self._connect().execute(
                "SELECT line FROM records WHERE pos >= ? ORDER BY pos", (start,)
            )
            return [_as_bytes(row[0]) for row in rows]

    async def append(self, lines: Sequence[bytes]) -> None:
        await asyncio.to_thread(self._append, lines)

    async def read(self, start: int) -> list[bytes]:
        return await asyncio.to_thread(self._read, start)

    async def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def describe(self) -> dict[str, object]:
        return {"sink": "sqlite", "path": str(self.path), "durable": True, "synchronous": "FULL"}


SINK_CRASH_MODEL = {
    "process_crash": "Every acknowledged record: append returns only after the sink stored it.",
    "power_loss": (
        "Every acknowledged record, as far as the sink's commit is durable (the SQLite sink "
        "commits with synchronous=FULL)."
    ),
    "disk_loss": "Whatever the sink's storage keeps; the SQLite sink keeps one copy.",
}


class SinkLogStore:
    """A :class:`LogStore` on an :class:`AsyncSink`.

    ``append`` returns once the sink's ``append`` returned, so ``sync`` has nothing left to do:
    every acknowledged record is as durable as the sink makes it. Opening reads the whole sink
    and verifies it; damage raises :class:`CorruptLogError` naming the record's position.

    Args:
        sink: where the records go.
        key: makes the chain keyed (HMAC-SHA-256).
        single_writer: this store is the sink's only writer (an edge device), so a saga left
            by any other owner belongs to an earlier, dead run and may be recovered. When
            false, other owners are assumed alive: a sink offers no lock to probe them.
    """

    kind = "sink"

    def __init__(
        self, sink: AsyncSink, *, key: bytes | None = None, single_writer: bool = True
    ) -> None:
        self.sink = sink
        self.single_writer = single_writer
        self._chain = Chain(key)
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="agent-saga-sink", daemon=True
        )
        self._thread.start()
        self._closed = False
        self._failed: BaseException | None = None
        self.owner_id = f"sink-{os.getpid()}-{os.urandom(6).hex()}"
        self._leases: set[str] = set()
        try:
            report = self._verify_lines(self._run(self.sink.read(0)))
        except BaseException:
            self._stop_loop()
            raise
        if report.error is not None:
            self._stop_loop()
            raise report.error
        self._seq, self._prev = report.records, report.last_hash

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def _verify_lines(self, lines: list[bytes]) -> VerifyReport:
        prev = GENESIS
        for index, line in enumerate(lines):
            result = parse_line(self._chain, line.rstrip(b"\n"), index + 1, prev)
            if isinstance(result, ChainBreak):
                error = CorruptLogError("sink", index, result.reason, seq=index + 1)
                return VerifyReport(False, index, error, prev)
            prev = result.hash
        return VerifyReport(True, len(lines), None, prev)

    def append(self, entries: Sequence[Entry], *, sync: bool) -> list[Record]:
        with self._lock:
            if self._closed or self._failed is not None:
                raise StoreFailedError(f"sink store unusable: {self._failed or 'closed'}")
            out, lines = [], []
            seq, prev = self._seq, self._prev
            for entry in entries:
                seq += 1
                record, line = self._chain.seal(entry, seq, prev)
                out.append(record)
                lines.append(line)
                prev = record.hash
            try:
                self._run(self.sink.append(lines))
            except Exception as exc:
                self._failed = exc
                raise StoreFailedError(f"sink append failed: {exc}") from exc
            self._seq, self._prev = seq, prev
            return out

    def sync(self) -> None:
        if self._failed is not None:
            raise StoreFailedError(f"sink store failed: {self._failed}")

    def records(self) -> Iterator[Record]:
        lines = self._run(self.sink.read(0))
        prev = GENESIS
        for index, line in enumerate(lines):
            result = parse_line(self._chain, line.rstrip(b"\n"), index + 1, prev)
            if isinstance(result, ChainBreak):
                raise CorruptLogError("sink", index, result.reason, seq=index + 1)
            prev = result.hash
            yield result

    def verify(self) -> VerifyReport:
        return self._verify_lines(self._run(self.sink.read(0)))

    def health(self) -> list[str]:
        if self._closed:
            return ["sink store is closed"]
        return [f"sink store failed: {self._failed}"] if self._failed is not None else []

    def describe(self) -> dict[str, object]:
        sink = self.sink.describe()
        durable = bool(sink.get("durable"))
        return {
            "kind": self.kind,
            **sink,
            "durable": durable,
            "survives": ["process crash", "power loss"] if durable else [],
            "crash_model": SINK_CRASH_MODEL if durable else MEMORY_CRASH_MODEL,
            "keyed_chain": self._chain.keyed,
        }

    def owner_alive(self, owner_id: str) -> bool:
        """This store's owner is alive while open; others per ``single_writer``."""
        if owner_id == self.owner_id:
            return not self._closed
        return not self.single_writer

    def lease(self, name: str, *, ttl: float) -> Lease | None:
        with self._lock:
            if name in self._leases:
                return None
            self._leases.add(name)
        return InProcessLease(name, self._leases, self._lock, self.append)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._run(self.sink.close())
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        with contextlib.suppress(RuntimeError):
            self._run(self._loop.shutdown_default_executor())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> SinkLogStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _as_bytes(value: object) -> bytes:
    """A stored line; text (a line rewritten through SQL) is read back as its UTF-8 bytes."""
    if isinstance(value, bytes):
        return value
    return str(value).encode("utf-8", "surrogateescape")
