"""The thread that keeps the saga index close behind the writer, off the transaction's path.

The writer's hook (:meth:`~.sagaindex.SagaIndex.follow`) only records the log's last ``seq``
and sets an event: O(1), no lock, no read, no raise. This thread, started by the first such
call in each process (a forked child starts its own), then indexes what the log gained
(:meth:`~.sagaindex.SagaIndex.index_behind`), but not while the writer is busy: it waits until
the writer has reported nothing for :data:`QUIET` seconds (an agent between tool calls), or
until :data:`BURST` records wait (a writer that never pauses), so its work seldom competes with
a transaction for the interpreter and is done in large, cheaper batches. It holds the index
weakly, so an index dropped without ``close()`` ends it; ``close()`` stops it after its current
chunk (and the index then catches up what is left, see :meth:`~.sagaindex.SagaIndex.close`).

Nothing depends on this thread for correctness: every reader catches the index up from the log
first, so a thread that lags, skips or dies costs only the next reader a longer catch-up.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Protocol

from .forks import process_id

QUIET = 0.05
"""Seconds without a report from the writer after which the thread indexes."""
BURST = 16_384
"""Records waiting after which the thread indexes even while the writer is busy."""


class _Indexes(Protocol):
    @property
    def indexed_seq(self) -> int: ...
    def index_behind(self) -> None: ...


class BehindWriter:
    """The indexer thread of one saga index (see the module docstring)."""

    def __init__(self) -> None:
        self.wake, self.stopping = threading.Event(), threading.Event()
        self.seq = 0
        """The log's last ``seq`` the writer reported."""
        self.thread: threading.Thread | None = None
        self._pid = 0

    def poke(self, index: _Indexes, seq: int) -> None:
        """Tell the thread the log now ends at ``seq`` (starting it in this process first)."""
        self.seq = seq
        if self._pid != process_id():  # none yet, or a forked child's first call
            self._pid = process_id()
            self.wake, self.stopping = threading.Event(), threading.Event()
            thread = threading.Thread(
                target=_run, args=(weakref.ref(index), self, self.wake, self.stopping),
                daemon=True,
            )  # fmt: skip
            thread.name = "agent-saga-index"
            self.thread = thread
            thread.start()
        if not self.wake.is_set():  # set until the thread starts indexing: one set per wake-up
            self.wake.set()

    def stop(self) -> bool:
        """Stop this process's thread and wait for it (it finishes the chunk it is on); whether
        this process had one."""
        if self._pid == os.getpid() and self.thread is not None:
            self.stopping.set()
            self.wake.set()
            self.thread.join()
            return True
        return False


def _run(
    ref: weakref.ref[_Indexes],
    writer: BehindWriter,
    wake: threading.Event,
    stopping: threading.Event,
) -> None:
    while True:
        if not wake.wait(1.0):
            if ref() is None:
                return
            continue
        seen = writer.seq
        while not stopping.wait(QUIET):  # the writer is busy: let it run (pokes are not waited on)
            index = ref()
            if index is None or writer.seq == seen or writer.seq - index.indexed_seq >= BURST:
                break
            seen = writer.seq
            del index
        # Cleared only now: while it stays set a poke costs one read, not a Condition's
        # notify. A poke after this line sets it again (its seq is stored before it looks), so
        # what it reports is indexed now or on the next wake-up.
        wake.clear()
        index = ref()
        if index is None or stopping.is_set():
            return
        index.index_behind()
        del index
