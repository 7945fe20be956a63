"""Solo mode: a writer alone on its home keeps ``log.lock`` between store rounds.

Every write to a home's log happens under an exclusive ``flock`` on ``log.lock``; readers take
it shared. A writer in shared mode takes and releases it around each round and first checks
whether another process appended (a one-byte read). When no other process waits for the lock,
the writer keeps it after a round ("solo"), and its later rounds skip the ``flock`` pair and
the tail check: while it holds the lock nobody else can have written.

Invariants:

* Solo means holding the ``flock`` on ``log.lock``: ``active`` is set only after the lock was
  taken and cleared before it is released, so two processes (or two stores of one process,
  each with its own open file description) can never both be solo, whatever their timing.
* Anyone who finds ``log.lock`` taken (:func:`take_log_lock`; :func:`lock_for_writing` for a
  store outside solo mode) waits in the waiting room
  (``log.wait``, held shared for the whole wait) and blocks on ``log.lock``. The solo
  holder's watcher thread tries ``log.wait`` exclusively every :data:`POLL` seconds; when it
  cannot (someone waits), it waits for the round in progress (``round``) and releases the
  lock. A holder enters solo only at the end of a round while holding the lock and only when
  it can take ``log.wait`` exclusively (nobody waiting); it is ``active`` before it lets go of
  ``log.wait``. So every waiter either made the entry fail or is seen by the next poll: no
  waiter sleeps behind a holder for more than about :data:`POLL_IDLE` seconds. (No FIFO or
  other special file: a home copied while an agent runs stays plain files.)
* A holder that left solo because it was asked re-enters no sooner than :data:`HOLDOFF`
  seconds later, so a process that reads now and then does not make it switch every round.
* Nothing here survives the holder: the kernel releases a dead holder's ``flock`` (a SIGKILL
  included). A child forked from a solo holder
  gets its own unlocked descriptor in place of the inherited one (:func:`_after_fork_in_child`),
  so a child outliving a killed parent never keeps the home locked.
* In-process readers of a home whose store is solo hold its ``round`` lock instead of taking
  the ``flock`` (:func:`reading_lock`), so the writer's own saga index or a history read does
  not knock it out of solo mode.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

from .files import LOCK_NAME, OS
from .fs import FileSystem

WAIT_NAME = "log.wait"
HOLDOFF = 1.0
"""Seconds after being asked to leave solo mode before a writer takes it again."""
POLL = 0.005
"""Seconds between a solo holder's looks into the waiting room while it writes..."""
POLL_IDLE = 0.05
"""...and once it has not written for :data:`BUSY` seconds (an idle holder costs less CPU)."""
BUSY = 0.1


class _Registry:
    """This process's solo stores, by the real path of their home."""

    holders: ClassVar[dict[str, SoloMode]] = {}
    lock: ClassVar[threading.Lock] = threading.Lock()


def take_log_lock(fd: int, home: Path, *, shared: bool = False) -> None:
    """Take ``flock`` on ``fd`` (``home``'s ``log.lock``), asking a solo holder to let go.

    Uncontended it costs one system call, as a plain ``flock``. Otherwise it blocks in the
    waiting room, where a solo holder sees it, until the lock is granted.
    """
    mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    with waiting_room(home):
        fcntl.flock(fd, mode)


def lock_for_writing(fs: FileSystem, fd: int, home: Path) -> None:
    """Take ``home``'s ``log.lock`` (open as ``fd``) exclusively through ``fs``, as a store
    outside solo mode does for a round. On real files, a lock already taken is waited for in
    the waiting room: a solo holder sees the wait and lets go (a plain blocking ``flock`` would
    wait as long as the holder stays idle)."""
    if fs is not OS:
        fs.lock(fd, blocking=True)
    elif not fs.lock(fd, blocking=False):
        with waiting_room(home):
            fs.lock(fd, blocking=True)


@contextlib.contextmanager
def waiting_room(home: Path) -> Iterator[None]:
    """Hold ``log.wait`` shared for the block: a solo holder of ``home`` lets go of
    ``log.lock`` within about :data:`POLL_IDLE` seconds while anyone is here."""
    try:
        wait_fd = os.open(home / WAIT_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:  # a read-only home: nobody can write it, so nobody holds it solo
        yield
        return
    try:
        fcntl.flock(wait_fd, fcntl.LOCK_SH)
        yield
    finally:
        os.close(wait_fd)


@contextlib.contextmanager
def reading_lock(home: Path) -> Iterator[None]:
    """Hold what keeps ``home``'s writers from being mid-batch, for a read of its tail.

    This process's own solo store: its ``round`` lock. Anything else: ``log.lock`` shared,
    through :func:`take_log_lock`. Yields without a lock when the home has no ``log.lock``.
    """
    holders = _Registry.holders
    holder = holders.get(os.path.realpath(home)) if holders else None
    if holder is not None:
        with holder.round:
            if holder.active:
                yield
                return
    try:
        fd = os.open(home / LOCK_NAME, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        yield
        return
    try:
        take_log_lock(fd, home, shared=True)
        yield
    finally:
        os.close(fd)


class SoloMode:
    """One writer's solo state on ``home``, whose ``log.lock`` is open as ``lock_fd``.

    The writer brackets each round with :meth:`begin` and :meth:`end`; :meth:`stop` leaves
    solo mode for good (closing).
    """

    def __init__(self, home: Path, lock_fd: int) -> None:
        self.home, self.lock_fd = home, lock_fd
        self.key = os.path.realpath(home)
        self.round = threading.Lock()
        """Held for a round in solo mode, and by whatever must not overlap one."""
        self.active = False
        self.entries = 0
        """How many times solo mode was entered (for tests and ``describe``)."""
        self._stopped = False
        self._left_at = -HOLDOFF
        self._halt = threading.Event()
        self._busy_at = 0.0
        self._watcher: threading.Thread | None = None

    def begin(self) -> bool:
        """Before a round: ``True`` when solo (hold on until :meth:`end`), else the ``flock``
        was taken and the caller must check what others appended."""
        self.round.acquire()
        if self.active:
            return True
        self.round.release()
        take_log_lock(self.lock_fd, self.home)
        return False

    def end(self, solo: bool) -> None:
        """After a round begun with :meth:`begin` (which returned ``solo``): keep the lock and
        become solo when nobody waits for it, else release it."""
        if solo:
            self._busy_at = time.monotonic()
            self.round.release()
        elif not self._enter():
            fcntl.flock(self.lock_fd, fcntl.LOCK_UN)

    def release(self, held: bool) -> None:
        """After a round that failed: release the ``flock`` (or the round) without entering."""
        if held:
            self.round.release()
        else:
            fcntl.flock(self.lock_fd, fcntl.LOCK_UN)

    def _enter(self) -> bool:
        """Holding the ``flock``: become solo when nobody waits (see the module docstring)."""
        if self._stopped or time.monotonic() - self._left_at < HOLDOFF:
            return False
        try:
            wait_fd = os.open(self.home / WAIT_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError:
            return False
        try:
            try:
                fcntl.flock(wait_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False  # someone waits for log.lock: let go of it
            with self.round:
                self.active = True
            with _Registry.lock:
                _Registry.holders[self.key] = self
            self._halt.clear()
            watcher = threading.Thread(
                target=self._watch, args=(wait_fd,), name="agent-saga-solo", daemon=True
            )
            try:
                watcher.start()
            except RuntimeError:  # no thread to watch the waiting room: stay in shared mode
                with self.round:
                    self.active = False
                self._unregister()
                return False
            wait_fd = -1  # the watcher owns it now
            self._watcher = watcher
            self.entries += 1
            return True
        finally:
            if wait_fd >= 0:
                os.close(wait_fd)

    def _watch(self, wait_fd: int) -> None:
        """The watcher: look into the waiting room every :data:`POLL` seconds while the holder
        writes, every :data:`POLL_IDLE` seconds when it is idle; leave solo mode
        when someone waits there (or :meth:`stop` asks), then exit."""
        try:
            fcntl.flock(wait_fd, fcntl.LOCK_UN)  # from now on waiters may come in
            while not self._halt.wait(
                POLL if time.monotonic() - self._busy_at < BUSY else POLL_IDLE
            ):
                try:
                    fcntl.flock(wait_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    break  # someone waits for log.lock
                fcntl.flock(wait_fd, fcntl.LOCK_UN)
        finally:
            os.close(wait_fd)
            self._leave()

    def _leave(self) -> None:
        """After the round in progress: clear ``active``, then release the lock."""
        with self.round:
            if not self.active:
                return
            self.active = False
            self._left_at = time.monotonic()
            fcntl.flock(self.lock_fd, fcntl.LOCK_UN)
        self._unregister()

    def _unregister(self) -> None:
        with _Registry.lock:
            if _Registry.holders.get(self.key) is self:
                del _Registry.holders[self.key]

    def stop(self) -> None:
        """Leave solo mode for good; returns once the lock is released. Idempotent."""
        self._stopped = True
        self._halt.set()
        watcher = self._watcher
        if watcher is not None and watcher is not threading.current_thread():
            watcher.join()


def _after_fork_in_child() -> None:
    """A forked child: an unlocked descriptor replaces each inherited solo ``log.lock`` (the
    parent's lock must die with the parent). The watcher does not exist in the child."""
    with contextlib.suppress(Exception):
        for holder in list(_Registry.holders.values()):
            fresh = os.open(holder.home / LOCK_NAME, os.O_RDWR | os.O_CLOEXEC)
            os.dup2(fresh, holder.lock_fd)
            os.close(fresh)
            holder.round = threading.Lock()
            holder.active, holder._watcher = False, None
            holder._stopped = True
    _Registry.holders = {}
    _Registry.lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)
