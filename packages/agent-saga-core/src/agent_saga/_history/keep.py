"""Keeping a recovery worker's lease alive while it settles a saga.

A lease that expires by time (PostgreSQL) would otherwise lapse under a slow compensator, and
another worker would take the saga over and compensate it again. :class:`KeptLease` renews it
every third of its ttl on a daemon thread; once a renewal finds it lost it stops, and every
record the worker writes through the lease is refused from then on (the lease's ``append`` is
fenced), so the worker cannot start another compensation.
"""

from __future__ import annotations

import threading
from types import TracebackType

from .._log.store import Lease


class KeptLease:
    """Renews ``lease`` to ``ttl`` seconds every ``ttl / 3`` seconds while the block runs.

    Leaving the block stops the renewals (it does not release the lease).
    """

    def __init__(self, lease: Lease, ttl: float) -> None:
        self.lease = lease
        self._ttl = ttl
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="agent-saga-lease", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self._ttl / 3):
            if not self.lease.renew(self._ttl):
                return

    def __enter__(self) -> KeptLease:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()


__all__ = ["KeptLease"]
