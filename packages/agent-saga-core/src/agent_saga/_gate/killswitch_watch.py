"""Watching the fleet's kill switch: its row kept in memory, told of every change by NOTIFY.

Read before every step, the row costs a round trip, and a halt is seen only when some thread
next reads it. :class:`HaltWatch` keeps one listening connection per switch on a daemon thread:
it reads the row, then waits for a notification on the switch's channel (``halt`` and
``resume`` send one in the same transaction as their change, so it arrives once the change is
committed) or for :data:`REFRESH` seconds, and reads again. Every process sees a halt
milliseconds after its commit, and a check before a step reads memory.

Fail-closed is kept: the watched state counts only while it was read less than :data:`FRESH`
seconds ago by this process's thread; otherwise (connection lost, thread starved, a forked
child) :meth:`HaltWatch.current` returns ``None`` and the caller reads the row itself, which
counts as halted when it cannot.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .killswitch import HaltState

if TYPE_CHECKING:
    from .._postgres.connection import PgConnection

REFRESH = 0.25
"""Seconds between reads of the row when no notification came."""
FRESH = 1.0
"""Seconds a read stays the answer: a watch that missed its refreshes this long is ignored."""


class HaltWatch:
    """The switch's row, re-read on every notification and every :data:`REFRESH` seconds.

    Args:
        connect: opens a new connection (autocommit) for the watch.
        channel: the notification channel ``halt`` and ``resume`` notify.
        read: reads the row's state on a connection.
    """

    def __init__(
        self,
        connect: Callable[[], PgConnection],
        channel: str,
        read: Callable[[PgConnection], HaltState],
    ) -> None:
        self._connect, self._channel, self._read = connect, channel, read
        self._state: HaltState | None = None
        self._fresh_until = 0.0
        self._pid = os.getpid()
        self._stop = threading.Event()
        self._conn: PgConnection | None = None
        self._thread = threading.Thread(target=self._run, name="agent-saga-halt", daemon=True)
        self._thread.start()

    def current(self) -> HaltState | None:
        """The watched state, or ``None`` when it is not known to be fresh (read the row)."""
        if os.getpid() != self._pid or time.monotonic() >= self._fresh_until:
            return None
        return self._state

    def _run(self) -> None:
        import psycopg
        from psycopg import sql

        while not self._stop.is_set():
            try:
                conn = self._conn = self._connect()
                conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
                while not self._stop.is_set():
                    started = time.monotonic()
                    state = self._read(conn)  # after LISTEN: no change falls between the two
                    self._state, self._fresh_until = state, started + FRESH
                    for _ in conn.notifies(timeout=REFRESH, stop_after=1):
                        pass
            except (psycopg.Error, OSError):
                self._fresh_until = 0.0
                self._stop.wait(REFRESH)
            finally:
                self._close_connection()

    def _close_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # already broken: nothing to give back
                return

    def close(self) -> None:
        """Stop watching (waits for the thread, at most about :data:`REFRESH` seconds)."""
        self._fresh_until = 0.0
        self._stop.set()
        if os.getpid() == self._pid:
            self._thread.join()


__all__ = ["FRESH", "REFRESH", "HaltWatch"]
