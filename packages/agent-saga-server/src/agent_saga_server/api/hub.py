"""Change notifications for one server process: what long-polls and streams wait on.

The database holds a version counter per topic (``killswitch``, ``approvals``), bumped in the
transaction that makes a change. One task per process reads the counters and, when one moved,
wakes the requests waiting on that topic. It looks at once when a change is made through this
process (:meth:`ChangeHub.poke`) or announced by another one (PostgreSQL's ``NOTIFY``, see
:mod:`..store.notify`), and every ``watch_interval`` seconds in any case. Nothing here is state:
a waiter that wakes re-reads the database, so a replica that misses a notification still
answers correctly at its next look.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import anyio.to_thread

from ..store import control
from ..store.control import SwitchState
from ..store.db import Database
from ..store.notify import ANY_TOPIC

log = logging.getLogger("agent_saga_server")


class ChangeHub:
    """Wakes waiters when a topic's version changes in the database."""

    def __init__(self, db: Database, interval: float) -> None:
        self.db = db
        self.interval = interval
        self.versions: dict[str, int] = {}
        self.switch: SwitchState | None = None
        """The kill switch as last read (``None`` while the database cannot be read)."""
        self._events: dict[str, asyncio.Event] = {}
        self._settled: dict[str, Any] = {}
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._unlisten: Callable[[], None] | None = None

    def event(self, topic: str) -> asyncio.Event:
        """An event set at the next change of ``topic`` (a fresh one after each change)."""
        found = self._events.get(topic)
        if found is None:
            found = self._events[topic] = asyncio.Event()
        return found

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self._look()
        self._task = asyncio.create_task(self._run())
        self._unlisten = await anyio.to_thread.run_sync(self.db.listen, self._announced)

    async def stop(self) -> None:
        if self._unlisten is not None:
            await anyio.to_thread.run_sync(self._unlisten)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def poke(self, rereads: str | None = None) -> None:
        """A change was just committed through this process (thread-safe).

        Without ``rereads``: look now (the kill switch's state is read by the look and pushed
        from it). ``rereads`` names a topic whose waiters read the database themselves when
        woken (approvals): they are woken at once and nothing is read here, since the look
        would only find what they read anyway (the next regular look still sees the version
        move and wakes that topic's waiters once more, which costs a read and changes no
        answer).
        """
        loop = self._loop
        if loop is not None and not loop.is_closed():
            if rereads is None:
                loop.call_soon_threadsafe(self._wake.set)
            else:
                loop.call_soon_threadsafe(self._set, rereads)

    def settle(self, key: str, answer: Any, keep: float = 1.0) -> None:
        """Hand the final ``answer`` for ``key`` (a decided approval, which never changes
        again but for its ``outcome``) to the waiters the next wake-up wakes, so they answer
        without reading it back; kept ``keep`` seconds. Thread-safe; call it before
        :meth:`poke` (the two run on the event loop in the order they were called)."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._keep, key, answer, keep)

    def _keep(self, key: str, answer: Any, keep: float) -> None:
        self._settled[key] = answer
        asyncio.get_running_loop().call_later(keep, self._settled.pop, key, None)

    def settled(self, key: str) -> Any | None:
        """What :meth:`settle` handed over for ``key`` in the last ``keep`` seconds, or
        ``None``; only for a waiter woken by a change (a fresh request reads the database)."""
        return self._settled.get(key)

    def _announced(self, topic: str) -> None:
        """Another process changed ``topic`` (called from the listener's thread)."""
        if topic in ("approvals", ANY_TOPIC):
            self.poke(rereads="approvals")
        if topic != "approvals":
            self.poke()

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval)
            self._wake.clear()
            await self._look()

    async def _look(self) -> None:
        try:
            versions, switch = await anyio.to_thread.run_sync(self._read)
        except Exception as exc:  # the database is unreachable: streams report it
            if self.switch is not None:
                log.warning("control plane database unreadable: %s", exc)
            self.switch = None
            self._set("killswitch")
            return
        self.switch = switch
        for topic, version in versions.items():
            if self.versions.get(topic) != version:
                self.versions[topic] = version
                self._set(topic)

    def _read(self) -> tuple[dict[str, int], SwitchState]:
        return control.versions_and_switch(self.db)

    def _set(self, topic: str) -> None:
        event = self._events.pop(topic, None)
        if event is not None:
            event.set()


__all__ = ["ChangeHub"]
