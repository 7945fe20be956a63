"""One watcher of the log's tails per process, shared by every open event stream.

Without it each stream polled the ``origins`` table every :data:`POLL` seconds on its own: 50
open pages made 500 reads a second while nothing happened. The watcher polls once per
interval for the whole process and wakes the streams when a tail moved; each stream then reads
only its own new records (from its own position, so ``Last-Event-ID`` still resumes per
client).

Invariant: :meth:`TailWatch.wait` returns once the watcher has seen the tails differ from what
they were when ``version`` was read, or on timeout. A stream reads :attr:`version` *before* it
reads its records, so a record stored after that read wakes it, and a record stored before it
is in the read. The polling task runs only while some stream waits (it ends after a round
with no waiter).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from starlette.concurrency import run_in_threadpool

from ..store.db import Database

POLL = 0.1


class TailWatch:
    """Polls ``read_tails(db)`` every :data:`POLL` seconds while streams wait on it."""

    def __init__(self, db: Database, read_tails: Callable[[Database], dict[str, int]]) -> None:
        self.db = db
        self.read_tails = read_tails
        self.version = 0
        self._tails: dict[str, int] | None = None
        self._waiters = 0
        self._changed: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    async def wait(self, version: int, timeout: float) -> None:
        """Until the tails moved since ``version`` was read, or ``timeout`` seconds."""
        if self.version != version:
            return
        if self._changed is None:
            self._changed = asyncio.Event()
        changed = self._changed
        self._waiters += 1
        try:
            if self._task is None or self._task.done():
                self._task = asyncio.get_running_loop().create_task(self._poll())
            await asyncio.wait_for(changed.wait(), timeout)
        except TimeoutError:
            pass
        finally:
            self._waiters -= 1

    async def _poll(self) -> None:
        while self._waiters > 0:
            tails = await run_in_threadpool(self.read_tails, self.db)
            if tails != self._tails:  # the first round too: a waiter may have missed it
                self._tails = tails
                self.version += 1
                changed, self._changed = self._changed, asyncio.Event()
                if changed is not None:
                    changed.set()
            await asyncio.sleep(POLL)


__all__ = ["POLL", "TailWatch"]
