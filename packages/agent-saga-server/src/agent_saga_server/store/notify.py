"""Change notifications between replicas on one PostgreSQL database (LISTEN/NOTIFY).

A transaction that changes a topic (``approvals``, ``killswitch``) bumps the topic's version
and sends ``NOTIFY`` on the schema's channel with the topic as payload; PostgreSQL delivers it
to every listening connection when, and only if, the transaction commits.
:class:`ChangeListener` holds one such connection per server process, in a thread of its own,
and calls back for each notification.

Nothing depends on a notification arriving: the versions stay in the database and every
process still looks at them now and then (:mod:`..api.hub`). While its connection is down the
listener retries every ``retry`` seconds, and after each (re)connection it calls back with
:data:`ANY_TOPIC`, since changes may have been missed meanwhile.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

ANY_TOPIC = "*"
"""The topic called back with when notifications may have been missed."""

log = logging.getLogger("agent_saga_server")


def channel_of(schema: str) -> str:
    """The notification channel of the control plane in ``schema`` (one per deployment)."""
    return f"{schema}_changes"[:63]


class ChangeListener:
    """Listens on ``channel`` of the PostgreSQL server at ``url`` until :meth:`stop`."""

    def __init__(
        self, url: str, channel: str, on_change: Callable[[str], None], *, retry: float = 1.0
    ) -> None:
        self.url = url
        self.channel = channel
        self.on_change = on_change
        self.retry = retry
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, daemon=True, name="agent-saga-server-listener"
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop listening; returns within about a second (the thread checks twice a second)."""
        self._stop.set()
        self._thread.join(2)

    def _run(self) -> None:
        import psycopg
        from psycopg import sql

        listen = sql.SQL("LISTEN {}").format(sql.Identifier(self.channel))
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True, connect_timeout=10) as conn:
                    conn.execute(listen)
                    self.on_change(ANY_TOPIC)
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=0.5):
                            self.on_change(note.payload)
            except psycopg.Error as exc:
                log.warning("listening for changes failed, retrying: %s", str(exc)[:200])
                self._stop.wait(self.retry)


__all__ = ["ANY_TOPIC", "ChangeListener", "channel_of"]
