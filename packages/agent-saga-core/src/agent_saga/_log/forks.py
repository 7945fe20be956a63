"""What a process forked after opening a store may do with it: nothing.

A child made by ``os.fork()`` (the default ``multiprocessing`` start method on Linux with
Python 3.11) inherits its parent's open descriptors, locks, owner id and sequence counters:
two processes would then append the same sequence numbers through one lock, and the log would
break. Every store, and every thread-backed helper, records the process that opened it in a
:class:`ForkGuard`; in any other process it refuses to write, with an error that says to open a
new kit there, and closing it releases nothing the parent still holds.

The current process id is kept in a module global updated by an ``os.register_at_fork`` hook,
so the check costs an attribute comparison, not a system call.
"""

from __future__ import annotations

import os

from .._errors import StoreFailedError


class _Process:
    """The current process id, kept up to date across forks without a system call per check."""

    pid = os.getpid()


def _after_fork_in_child() -> None:
    _Process.pid = os.getpid()


os.register_at_fork(after_in_child=_after_fork_in_child)


def process_id() -> int:
    """This process's id (``os.getpid()``), kept across forks, without a system call."""
    return _Process.pid


class InheritedStoreError(StoreFailedError):
    """A store (or kit) opened in another process was used in a forked child."""


class ForkGuard:
    """Remembers the process that opened something; says when it is used in another."""

    __slots__ = ("pid", "what")

    def __init__(self, what: str) -> None:
        self.pid = _Process.pid
        self.what = what

    @property
    def inherited(self) -> bool:
        """True in a process forked after the guarded object was opened."""
        return self.pid != _Process.pid

    def check(self) -> None:
        """Raise :class:`InheritedStoreError` when used in a process forked after opening."""
        if self.pid != _Process.pid:
            raise InheritedStoreError(
                f"{self.what} was opened by process {self.pid} and inherited by process "
                f"{_Process.pid} "
                "through fork(); it never writes here: create a new AgentKit (or store) in this "
                "process"
            )
