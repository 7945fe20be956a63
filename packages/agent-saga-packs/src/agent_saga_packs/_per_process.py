"""Clients built once per process, never shared across ``fork``.

An HTTP client keeps a pool of open connections. After ``os.fork`` the child holds the same
sockets as its parent: a request the child sends and a response the parent then reads can
cross. A pack therefore builds its SDK clients (boto3, PyGithub, python-gitlab) through
:class:`PerProcess`, which builds a fresh one in each process.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class PerProcess(Generic[T]):
    """``get()`` returns the object ``factory`` built in this process (built on first use).

    Thread-safe within a process. In a forked child the parent's object is never returned, and
    the lock is new (a lock some parent thread held at the fork would stay held in the child).
    """

    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._value: T | None = None

    def get(self) -> T:
        pid = os.getpid()
        if pid != self._pid:
            self._lock, self._value, self._pid = threading.Lock(), None, pid
        with self._lock:
            if self._value is None:
                self._value = self._factory()
            return self._value
