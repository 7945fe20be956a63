"""Shipping an agent's log to the control plane, in the background.

The local durable log is the write-ahead log; nothing on a transaction's path waits for the
network. A thread reads the records appended since it last looked (the file store is followed
by byte offset; other stores are re-read and skipped) and posts them in batches
(``POST /v1/origins/{origin}/records``, at most 2,000 records, the server's batch limit, or
about 4 MiB each: the server's cost per request is about that of 50-70 records). It starts
from where the server's copy ends (``GET /v1/origins/{origin}``), after checking that the
server's last record is the local record at that ``seq``: so after a crash or a restart it
resumes without loss, and a batch the server stored but whose answer was lost is sent again
and skipped there as identical (the server is idempotent by (origin, seq)). A record is never
dropped: until the server takes it, it stays in the local log.

Checkpoints the kit publishes in its home (``checkpoints/latest.note``) are sent once the
server holds the records they cover, with a consistency proof from the server's last accepted
one, computed on a Merkle tree of the log the shipper keeps (about 64 bytes per record).
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agent_saga import FileLogStore, LogStore, Record
from agent_saga.proofs import (
    CheckpointError,
    MerkleTree,
    NoteError,
    NoteVerifier,
    open_checkpoint,
    record_leaf,
)

from .http import ServerClient, ServerRefused, ServerUnreachable

GENESIS = "0" * 64
BATCH_RECORDS = 2000
BATCH_BYTES = 4 * 1024 * 1024


class LogDiverged(Exception):
    """The server's copy is not a prefix of the local log (another log under this origin)."""


class Shipper:
    """Ships one store's records and checkpoints to one origin (see the module docstring)."""

    def __init__(
        self,
        client: ServerClient,
        origin: str | None,
        store: LogStore,
        home: Path,
        *,
        interval: float = 0.2,
    ) -> None:
        self.client = client
        self.origin = origin
        self.store = store
        self.home = home
        self.interval = interval
        self.shipped = 0
        """The server's last seq, as last confirmed."""
        self.read = 0
        self.problem: str | None = None
        """Why shipping is stopped for good (a conflict), if it is."""
        self.last_error: str | None = None
        """The last transient failure (the server unreachable), cleared by a success."""
        self.server_checkpoint = 0
        self.checkpoint_problem: str | None = None
        self._refused_checkpoint = -1
        self._pending: deque[Record] = deque()
        self._tree = MerkleTree()
        self._position = (0, 0, GENESIS)  # byte offset, seq, hash of the last record read
        self._synced = False
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="agent-saga-shipper")
        self._thread.start()

    @property
    def origin_path(self) -> str:
        return f"/v1/origins/{self.origin}"

    def describe(self) -> dict[str, Any]:
        return {
            "origin": self.origin,
            "shipped_seq": self.shipped,
            "read_seq": self.read,
            "server_checkpoint_size": self.server_checkpoint,
            "problem": self.problem,
            "checkpoint_problem": self.checkpoint_problem,
            "last_error": self.last_error,
        }

    def wake(self) -> None:
        self._wake.set()

    def drain(self, size: int, timeout: float) -> dict[str, Any]:
        """Wait until the server holds the log's first ``size`` records and a checkpoint of at
        least ``size`` (once the home's checkpoint covers them), at most ``timeout`` seconds
        or until shipping stops; the state then (:meth:`describe`, with ``drained``)."""
        deadline = time.monotonic() + timeout
        while True:
            drained = self.shipped >= size and self.server_checkpoint >= size
            if drained or self.problem is not None or time.monotonic() >= deadline:
                return {**self.describe(), "drained": drained}
            self._wake.set()
            time.sleep(0.02)

    def close(self, deadline: float = 3.0) -> None:
        """Ship what can be shipped within ``deadline`` seconds, then stop the thread."""
        self._stop.set()
        self._wake.set()
        self._thread.join(deadline + 1.0)
        self.client.close()

    # -- the thread ------------------------------------------------------------------------

    def _run(self) -> None:
        stop_at: float | None = None
        while self.problem is None:
            if self._stop.is_set():
                stop_at = stop_at or time.monotonic() + 3.0
            try:
                busy = self._step()
                self.last_error = None
            except ServerUnreachable as exc:
                self.last_error = str(exc)[:300]
                busy = False
            except LogDiverged as exc:
                self.problem = str(exc)
                return
            except ServerRefused as exc:
                if exc.status == 409:  # the server's copy conflicts with this log
                    self.problem = f"the server refused records of {self.origin}: {exc.detail}"
                    return
                self.last_error = str(exc)[:300]
                self._synced = False  # learn again where the server stands
                busy = False
            except Exception as exc:  # reading the local log failed: retried, reported
                self.last_error = f"{type(exc).__name__}: {exc}"[:300]
                busy = False
            if stop_at is not None and (not busy or time.monotonic() > stop_at):
                return
            if not busy:
                self._wake.wait(self.interval)
                self._wake.clear()

    def _step(self) -> bool:
        """One round: sync if needed, read, send one batch, send a checkpoint. True if it sent."""
        if not self._synced:
            self._sync()
        self._fill()
        sent = self._send_batch()
        self._send_checkpoint()
        return sent

    def _sync(self) -> None:
        if self.origin is None:  # the server was unreachable when the kit started
            self.origin = str(self.client.get("/v1/whoami")["origin"])
        state = self.client.get(self.origin_path)
        last_seq, last_hash = int(state["last_seq"]), str(state["last_hash"])
        self.server_checkpoint = int(state["checkpoint_size"])
        self._pending.clear()
        self._tree = MerkleTree()
        self._position = (0, 0, GENESIS)
        for record in self._new_records():
            self._tree.append(record_leaf(record))
            if record.seq == last_seq and record.hash != last_hash:
                raise LogDiverged(
                    f"the server's record {last_seq} of origin {self.origin} is not this log's; "
                    "is another log shipping under the same origin?"
                )
            if record.seq > last_seq:
                self._pending.append(record)
            if record.seq >= last_seq and len(self._pending) >= BATCH_RECORDS * 2:
                break
        if self._position[1] < last_seq:
            raise LogDiverged(
                f"the server holds {last_seq} records of origin {self.origin}, "
                f"this log {self._position[1]}"
            )
        self.shipped = last_seq
        self._synced = True

    def _new_records(self) -> Iterator[Record]:
        offset, seq, prev = self._position
        if isinstance(self.store, FileLogStore):
            for end, record in self.store.follow(offset, seq, prev):
                self._position = (end, record.seq, record.hash)
                self.read = record.seq
                yield record
            return
        for record in self.store.records():
            if record.seq <= seq:
                continue
            self._position = (0, record.seq, record.hash)
            self.read = record.seq
            yield record

    def _fill(self) -> None:
        if len(self._pending) >= BATCH_RECORDS * 2:
            return
        for record in self._new_records():
            self._tree.append(record_leaf(record))
            self._pending.append(record)
            if len(self._pending) >= BATCH_RECORDS * 2:
                return

    def _send_batch(self) -> bool:
        if not self._pending:
            return False
        batch: list[dict[str, Any]] = []
        size = 0
        for record in self._pending:
            obj = record.to_json()
            size += len(json.dumps(obj["data"], ensure_ascii=False)) + 300
            if batch and (len(batch) >= BATCH_RECORDS or size > BATCH_BYTES):
                break
            batch.append(obj)
        answer = self.client.post(f"{self.origin_path}/records", {"records": batch})
        self.shipped = int(answer["last_seq"])
        while self._pending and self._pending[0].seq <= self.shipped:
            self._pending.popleft()
        return True

    def _send_checkpoint(self) -> None:
        note_path = self.home / "checkpoints" / "latest.note"
        key_path = self.home / "keys" / "checkpoint.pub"
        try:
            note = note_path.read_text(encoding="utf-8")
            key = key_path.read_text(encoding="utf-8").strip()
            checkpoint = open_checkpoint(note, [NoteVerifier.parse(key)])
        except (OSError, UnicodeDecodeError, NoteError, CheckpointError):
            return  # none yet (or being replaced): the next round looks again
        size = checkpoint.size
        if size <= self.server_checkpoint or size > self.shipped or size > self._tree.size:
            return
        if size == self._refused_checkpoint:
            return  # refused once (kept as evidence there): not sent again
        older = self.server_checkpoint
        proof = self._tree.consistency_proof(older, size) if older else []
        body = {
            "note": note,
            "proof": [base64.b64encode(h).decode() for h in proof],
            "verifier": key,
        }
        try:
            answer = self.client.post(f"{self.origin_path}/checkpoints", body)
        except ServerRefused as exc:
            self._refused_checkpoint = size
            self.checkpoint_problem = f"checkpoint of {size} records refused: {exc.detail}"
            return
        self.server_checkpoint = int(answer["size"])
        self.checkpoint_problem = None


__all__ = ["LogDiverged", "Shipper"]
