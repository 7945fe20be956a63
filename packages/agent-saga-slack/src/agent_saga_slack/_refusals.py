"""A bound on the ``approval.refused`` records that Slack users can make the app write.

Every refused vote is an fsynced record in the agents' log, and anyone in the workspace can send
votes (a click on an old message, ``/saga-approve approve <any id>``). :class:`RefusalLimit`
lets the app write at most ``per_user`` refusals per user and ``total`` in all within each
``window`` seconds; the rest are answered in Slack as usual but not written, and counted, so the
next record written (or the warning logged when a window closes) says how many were left out.
Votes that can count are never held back by it: whether a vote counts is still decided by
:func:`agent_saga.submit_vote`, which writes to a :class:`RefusalGate` over the agents' log that
lets every vote through and holds back only the refusals over the limit.

The limit is kept in memory, per app object: a server with several worker processes has one
each.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent_saga import Entry, Kind, LogStore, Record, VerifyReport

log = logging.getLogger("agent_saga_slack")


@dataclass
class RefusalLimit:
    """At most ``per_user`` refusal records per user and ``total`` in all per ``window`` seconds.

    Windows are fixed (``[k*window, (k+1)*window)`` on ``clock``), so a steady flood writes at
    most ``per_user`` records per user and ``total`` in all per window; a flood that spans a
    window boundary at most twice that. The first refusal of a quiet user is always written
    unless ``total`` refusals were already written in the window.
    """

    per_user: int = 3
    total: int = 30
    window: float = 60.0
    _window: int = field(default=-1, init=False, repr=False)
    _written: dict[str, int] = field(default_factory=dict, init=False, repr=False)
    _left_out: dict[str, int] = field(default_factory=dict, init=False, repr=False)
    _dropped: int = field(default=0, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.per_user < 1 or self.total < 1 or self.window <= 0:
            raise ValueError("per_user and total must be >= 1 and window > 0")

    def admit(self, user: str, now: float) -> int | None:
        """Whether a refusal by ``user`` at ``now`` may be written.

        Returns:
            ``None``: do not write it (it is counted as left out); else the number of this
            user's refusals left out since their last record (to note in the record).
        """
        with self._lock:
            self._roll(now)
            if self._written.get(user, 0) >= self.per_user or sum(self._written.values()) >= (
                self.total
            ):
                self._left_out[user] = self._left_out.get(user, 0) + 1
                self._dropped += 1
                return None
            self._written[user] = self._written.get(user, 0) + 1
            return self._left_out.pop(user, 0)

    def left_out(self) -> int:
        """Refusals not written and not yet noted in a later record, all users."""
        with self._lock:
            return sum(self._left_out.values())

    def _roll(self, now: float) -> None:
        current = int(now // self.window)
        if current == self._window:
            return
        if self._dropped:
            log.warning(
                "%d refused Slack vote(s) were not logged in the last %.0f s (over %d per user "
                "or %d in all)",
                self._dropped,
                self.window,
                self.per_user,
                self.total,
            )
        self._window = current
        self._written.clear()
        self._dropped = 0
        if len(self._left_out) > 10 * self.total:  # bounded memory under a many-user flood
            self._left_out.clear()


class RefusalGate:
    """The agents' log as one vote sees it: every record but an ``approval.refused`` over the
    limit goes through to ``store``.

    A refusal admitted by ``limit`` is written with ``unlogged``: how many of this user's
    refusals were left out before it. One held back is not written at all (``append``
    returns no record for it); it changes nothing, as a refused vote changes nothing.
    """

    def __init__(self, store: LogStore, limit: RefusalLimit, user: str, now: float) -> None:
        self._store = store
        self._limit = limit
        self._user = user
        self._now = now
        self.kind = store.kind
        self.owner_id = store.owner_id
        self.held_back = False

    def append(self, entries: Sequence[Entry], *, sync: bool) -> list[Record]:
        kept: list[Entry] = []
        for entry in entries:
            if entry.kind != Kind.APPROVAL_REFUSED:
                kept.append(entry)
                continue
            unlogged = self._limit.admit(self._user, self._now)
            if unlogged is None:
                self.held_back = True
            elif unlogged:
                kept.append(entry._replace(data={**entry.data, "unlogged": unlogged}))
            else:
                kept.append(entry)
        return self._store.append(kept, sync=sync) if kept else []

    def sync(self) -> None:
        self._store.sync()

    def records(self) -> Iterator[Record]:
        return self._store.records()

    def verify(self) -> VerifyReport:
        return self._store.verify()

    def health(self) -> list[str]:
        return self._store.health()

    def describe(self) -> dict[str, object]:
        return self._store.describe()

    def owner_alive(self, owner_id: str) -> bool:
        return self._store.owner_alive(owner_id)

    def lease(self, name: str, *, ttl: float) -> Any:
        return self._store.lease(name, ttl=ttl)

    def close(self) -> None:
        """Nothing: the log belongs to whoever opened it."""
