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
* Anyone who finds ``log.lock`` taken (:func:`take_log_lock`) waits in the waiting room
  (``log.wait``, held shared while waiting), rings the bell (``log.bell``, a FIFO that only a
  solo holder has open for reading) and then blocks on ``log.lock``. The solo holder's watcher
  thread, asleep on the bell, wakes, waits for the round in progress (``round``) and releases
  the lock. A holder enters solo only at the end of a round while holding the lock and only
  when it can take ``log.wait`` exclusively (nobody waiting); it opens the bell before letting
  go of ``log.wait``. So every waiter either made the entry fail or rings after the holder
  listens: no waiter sleeps behind an idle holder.
* A holder that left solo because it was asked re-enters no sooner than :data:`HOLDOFF`
  seconds later, so a process that reads now and then does not make it switch every round.
* Nothing here survives the holder: the kernel releases a dead holder's ``flock`` (a SIGKILL
  included) and a FIFO with no reader makes ringing a no-op. A child forked from a solo holder
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
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

from .files import LOCK_NAME

BELL_NAME = "log.bell"
WAIT_NAME = "log.wait"
HOLDOFF = 1.0
"""Seconds after being asked to leave solo mode before a writer takes it again."""
_WAKE = b"!"


class _Registry:
    """This process's solo stores, by the real path of their home."""

    holders: ClassVar[dict[str, SoloMode]] = {}
    lock: ClassVar[threading.Lock] = threading.Lock()


def take_log_lock(fd: int, home: Path, *, shared: bool = False) -> None:
    """Take ``flock`` on ``fd`` (``home``'s ``log.lock``), asking a solo holder to let go.

    Uncontended it costs one system call, as a plain ``flock``. Otherwise it waits in the
    waiting room, rings the bell and blocks until the lock is granted.
    """
    mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    wait_fd = os.open(home / WAIT_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(wait_fd, fcntl.LOCK_SH)
        ring(home)
        fcntl.flock(fd, mode)
    finally:
        os.close(wait_fd)


def ring(home: Path) -> None:
    """Ask a solo holder of ``home`` (if any) to release ``log.lock``; never blocks."""
    try:
        fd = os.open(home / BELL_NAME, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:  # no bell, or nobody listening: no solo holder
        return
    try:
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.write(fd, _WAKE)
    except OSError:  # a full pipe: rings are already pending
        pass
    finally:
        os.close(fd)


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
        self._bell: int | None = None
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
            bell = _open_bell(self.home)
            if bell is None:
                return False
            with self.round:
                self.active, self._bell = True, bell
            watcher = threading.Thread(
                target=self._watch, args=(bell,), name="agent-saga-solo", daemon=True
            )
            try:
                watcher.start()
            except RuntimeError:  # no thread to hear the bell: stay in shared mode
                with self.round:
                    self.active, self._bell = False, None
                os.close(bell)
                return False
            self._watcher = watcher
            self.entries += 1
            with _Registry.lock:
                _Registry.holders[self.key] = self
            return True
        finally:
            os.close(wait_fd)  # releases log.wait: later waiters ring a bell that is heard

    def _watch(self, bell: int) -> None:
        """The watcher: asleep on the bell until rung (or woken by :meth:`stop`), then leave.

        Only the watcher leaves solo mode, and only after its read returned: when ``log.lock``
        is released no thread of this holder still reads the bell, so a later holder's bell
        is never answered here in its place.
        """
        with contextlib.suppress(OSError):
            os.read(bell, 64)
        try:
            self._leave()
        finally:
            os.close(bell)

    def _leave(self) -> None:
        """After the round in progress: clear ``active``, then release the lock."""
        with self.round:
            if not self.active:
                return
            self.active, self._bell = False, None
            self._left_at = time.monotonic()
            fcntl.flock(self.lock_fd, fcntl.LOCK_UN)
        with _Registry.lock:
            if _Registry.holders.get(self.key) is self:
                del _Registry.holders[self.key]

    def stop(self) -> None:
        """Leave solo mode for good and wait until the lock is released. Idempotent."""
        self._stopped = True
        with self.round:  # the watcher cannot close the bell while this is held
            if self.active and self._bell is not None:
                with contextlib.suppress(OSError):
                    os.write(self._bell, _WAKE)
            watcher = self._watcher
        if watcher is not None and watcher is not threading.current_thread():
            watcher.join(timeout=5.0)


def _open_bell(home: Path) -> int | None:
    """The bell's read end (created as a FIFO when missing); ``None`` when it cannot be."""
    path = home / BELL_NAME
    try:
        os.mkfifo(path, 0o600)
    except FileExistsError:
        pass
    except OSError:  # no FIFOs here: the store stays in shared mode
        return None
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)  # never blocks; also lets stop() wake it
    except OSError:
        return None
    if not stat.S_ISFIFO(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def _after_fork_in_child() -> None:
    """A forked child: an unlocked descriptor replaces each inherited solo ``log.lock`` (the
    parent's lock must die with the parent) and the bell is closed (only the parent listens)."""
    with contextlib.suppress(Exception):
        for holder in list(_Registry.holders.values()):
            fresh = os.open(holder.home / LOCK_NAME, os.O_RDWR | os.O_CLOEXEC)
            os.dup2(fresh, holder.lock_fd)
            os.close(fresh)
            bell = holder._bell
            if bell is not None:
                null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
                os.dup2(null, bell)
                os.close(null)
            holder.round = threading.Lock()
            holder.active, holder._bell, holder._watcher = False, None, None
            holder._stopped = True
    _Registry.holders = {}
    _Registry.lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)
