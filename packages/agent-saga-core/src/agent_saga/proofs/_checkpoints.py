"""The home's checkpoints: publishing them, refusing forks, and the background checkpointer.

``checkpoints/latest.note`` is the latest accepted signed checkpoint. A new one replaces it only
after a consistency proof from it verifies; a refused pair is kept under ``checkpoints/forks/``
as evidence. Processes sharing a home serialize publishing with an ``flock``.

:class:`Checkpointer` publishes from a background thread every ``every`` records or ``interval``
seconds (when the log grew), and once more at clean shutdown. It reads the log like any reader
and fsyncs only its own files, so no transaction ever waits for a checkpoint.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
import weakref
from collections.abc import Mapping
from pathlib import Path

from .._errors import ConfigurationError, CorruptLogError
from .._log.files import ensure_dir, write_atomic
from .._log.forks import ForkGuard
from .._log.store import LogStore
from ._checkpoint import (
    Checkpoint,
    CheckpointError,
    ForkError,
    UncapturedError,
    check_extension,
    open_checkpoint,
)
from ._frontierfile import any_start, keep_frontier, newest_start
from ._logtree import LogTree
from ._note import NoteSigner, NoteVerifier
from ._notefiles import note_size
from ._tree import MerkleTree
from ._unfinished import signed_head

CHECKPOINTS_DIR = "checkpoints"
LATEST_NAME = "latest.note"
FORKS_DIR = "forks"
_LOCK_NAME = ".lock"


class CheckpointLog:
    """The checkpoints kept in one agent-saga home."""

    def __init__(self, home: Path) -> None:
        self.directory = home / CHECKPOINTS_DIR
        self.latest_path = self.directory / LATEST_NAME
        self.points = self.directory / "verified"
        """Where resume points are kept (see :mod:`._resume`)."""

    def latest(self, verifiers: list[NoteVerifier]) -> Checkpoint | None:
        """The latest accepted checkpoint, verified; ``None`` when none was ever published.

        Raises:
            CheckpointError: the file exists but is not a checkpoint signed by ``verifiers``.
        """
        note = self.read_note()
        return None if note is None else open_checkpoint(note, verifiers)

    def read_note(self) -> str | None:
        """The latest checkpoint's signed note as text, unchecked; ``None`` when there is none.

        Raises:
            CheckpointError: the file exists but cannot be read as text.
        """
        try:
            return self.latest_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            raise CheckpointError(f"cannot read {self.latest_path}: {exc}") from exc

    def publish(
        self, tree: MerkleTree, signer: NoteSigner, lines: tuple[str, ...] = ()
    ) -> Checkpoint:
        """Sign ``tree``'s head (with extension ``lines``), the latest checkpoint if it extends it.

        Returns the latest checkpoint afterwards: the new one, or the existing one when it
        already covers as many records (another process got there first).

        Raises:
            ForkError: ``tree`` does not extend the latest checkpoint; both are kept in
                ``forks/`` and the latest stays in place.
            CheckpointError: the latest checkpoint is unreadable or signed by another key.
        """
        ensure_dir(self.directory)
        lock_fd = os.open(self.directory / _LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
            return self._publish_locked(tree, signer, lines)
        finally:
            os.close(lock_fd)

    def _publish_locked(
        self, tree: MerkleTree, signer: NoteSigner, lines: tuple[str, ...]
    ) -> Checkpoint:
        previous, size, origin = self.latest([signer.verifier]), tree.size, signer.name
        if previous is not None and previous.size >= size:
            if previous.size == size and previous.root != tree.root(size):
                fresh = Checkpoint(origin, size, tree.root(size)).sign(signer)
                self._keep_evidence(previous, fresh)
                raise ForkError(f"two roots for the first {size} records", previous, fresh)
            return previous
        fresh = Checkpoint(origin, size, tree.root(size), lines).sign(signer)
        if previous is not None:
            proof = tree.consistency_proof(previous.size, size) if previous.size else []
            try:
                check_extension(previous, fresh, proof)
            except ForkError:
                self._keep_evidence(previous, fresh)
                raise
        write_atomic(self.latest_path, fresh.note.encode())
        return fresh

    def publish_head(
        self, size: int, root: bytes, roots: Mapping[int, bytes], signer: NoteSigner,
        extensions: tuple[str, ...] = (),
    ) -> Checkpoint:  # fmt: skip
        """:meth:`publish` for a streaming pass: the head ``(size, root)``, with ``roots`` the
        roots it computed at the sizes of earlier checkpoints (instead of a whole tree).

        The latest checkpoint is extended only if its root is the one the pass computed at its
        size: a direct recomputation, stronger than a consistency proof.

        Raises:
            ForkError: the root computed at the latest checkpoint's size differs from its own.
            CheckpointError: the latest checkpoint is unreadable, signed by another key, or was
                published while the log was read at a size the pass did not capture (run again).
        """
        ensure_dir(self.directory)
        lock_fd = os.open(self.directory / _LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
            previous = self.latest([signer.verifier])
            fresh = Checkpoint(signer.name, size, root, extensions).sign(signer)
            if previous is not None and 0 < previous.size <= size:
                seen = root if previous.size == size else roots.get(previous.size)
                if seen is None:
                    raise UncapturedError(previous.size)
                if seen != previous.root:
                    mine = Checkpoint(signer.name, previous.size, seen).sign(signer)
                    self._keep_evidence(previous, mine)
                    raise ForkError(
                        f"two roots for the first {previous.size} records", previous, mine
                    )
            if previous is not None and previous.size >= size:
                return previous
            write_atomic(self.latest_path, fresh.note.encode())
            return fresh
        finally:
            os.close(lock_fd)

    def _keep_evidence(self, older: Checkpoint, newer: Checkpoint) -> None:
        forks = self.directory / FORKS_DIR
        ensure_dir(forks)
        stamp = f"{int(time.time() * 1000)}-{os.getpid()}"
        write_atomic(forks / f"{stamp}-accepted-{older.size}.note", older.note.encode())
        write_atomic(forks / f"{stamp}-refused-{newer.size}.note", newer.note.encode())


class Checkpointer:
    """Publishes checkpoints of one store's log in the background (see the module docstring).

    Args:
        home: where the key and checkpoints live.
        store: the log to follow.
        every: publish once this many records were appended since the last checkpoint.
        interval: otherwise publish this many seconds after the last one, if the log grew.
        poll: how often the thread looks for new records.
    """

    def __init__(
        self,
        home: Path,
        store: LogStore,
        *,
        every: int = 1000,
        interval: float = 60.0,
        poll: float = 1.0,
    ) -> None:
        if every < 1 or interval <= 0 or poll <= 0:
            raise ValueError("every must be >= 1; interval and poll must be positive")
        self.home = home
        self.log = CheckpointLog(home)
        self.tree = LogTree(store)
        self._started = False
        self._resumed_at = 0
        self._kept = 0
        self.every = every
        self.interval = interval
        self._poll = poll
        self.last_error: Exception | None = None
        self._signer: NoteSigner | None = None
        self._published = 0
        self._published_at = time.monotonic()
        self._publish_lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.process = ForkGuard(f"the checkpointer of {home}")
        """A process forked after this checkpointer started publishes nothing through it."""

    @property
    def poll(self) -> float:
        return self._poll

    @poll.setter
    def poll(self, seconds: float) -> None:
        """Change how often the thread looks (it wakes now to take the new period)."""
        self._poll = seconds
        self._wake.set()

    def start(self) -> None:
        # The thread holds the checkpointer weakly: a kit dropped without close() stops it.
        self._thread = threading.Thread(
            target=_run, args=(weakref.ref(self), self._stop, self._wake), daemon=True
        )
        self._thread.name = "agent-saga-checkpoints"
        self._thread.start()

    @property
    def signer(self) -> NoteSigner:
        if self._signer is None:
            from ._signing import home_signer  # loads cryptography: only once there is work

            self._signer = home_signer(self.home)
        return self._signer

    def checkpoint(self) -> Checkpoint:
        """Publish a checkpoint of every record appended so far (now, in this thread)."""
        self.process.check()
        with self._publish_lock:
            try:
                self._follow()
                try:
                    published = self._publish()
                except UncapturedError as exc:  # rare: read again, up to its size
                    self._start(exc.size)
                    self._follow()
                    published = self._publish()
            except ForkError as exc:
                self.last_error = exc
                raise
            self._published = max(self._published, published.size)
            self._published_at = time.monotonic()
            # where the next kit's checkpointer resumes (see ._frontierfile)
            if published.size > self._kept and keep_frontier(self.home, published, self.tree):
                self._kept = published.size
            return published

    def _publish(self) -> Checkpoint:
        """Sign the tree's head with the statement of the unfinished sagas at it."""
        size, root, lines = signed_head(self.tree, lambda: self.log.latest([self.signer.verifier]))
        return self.log.publish_head(size, root, self.tree.roots, self.signer, lines)

    def _follow(self) -> int:
        """Bring the tree up to date, capturing the root at the latest checkpoint's size; the
        first time, start from the newest stored resume point (see :mod:`._resume`)."""
        if not self._started:
            self._start(None)
        try:
            note = self.log.read_note()
        except CheckpointError:
            note = None
        if note is not None:
            self.tree.capture(note_size(note))
        resumed = self.tree.size > 0 and self._resumed_at == self.tree.size
        try:
            return self.tree.update()
        except CorruptLogError:
            if not resumed:
                raise
            self._start(0)  # the log does not continue the point: read it all
            return self._follow()

    def _start(self, at_most: int | None) -> None:
        """Start the tree again, from the newest resume point of at most ``at_most`` records
        (any when ``None``; none when 0)."""
        self._started = True
        self.tree.restart()
        self._resumed_at = 0
        if at_most != 0 and any_start(self.home):
            self._start_at_point(at_most)
        if at_most:
            self.tree.capture(at_most)

    def _start_at_point(self, at_most: int | None) -> None:
        from ._signing import home_verifier  # loads cryptography: only when there are points

        verifier = home_verifier(self.home)
        if verifier is not None:
            point = newest_start(self.home, at_most, [verifier])
            if point is not None:
                state = point.state
                if self.tree.start_at(
                    state.size, state.frontier, state.edge, state.hash, state.offset,
                    point.checkpoint.root,
                ):  # fmt: skip
                    self._resumed_at = state.size

    def _due(self) -> bool:
        grown = self._follow() - self._published
        if grown <= 0:
            return False
        return grown >= self.every or time.monotonic() - self._published_at >= self.interval

    def poll_once(self) -> None:
        """One look from the background thread: publish if due; remember a failure.

        After a fork nothing more is published: the log no longer extends its checkpoint, and
        that stays so until a human looks (``status()`` says so).
        """
        if isinstance(self.last_error, ForkError):
            return
        try:
            if self._due():
                self.checkpoint()
            self.last_error = None
        except Exception as exc:  # reported by status(); retried at the next poll
            self.last_error = exc

    def describe(self) -> dict[str, object]:
        """The checkpoint policy for the guarantees manifest."""
        return {
            "signed": "Ed25519, C2SP signed note (tlog-checkpoint body)",
            "every_records": self.every,
            "interval_seconds": self.interval,
            "at_close": True,
            "published_size": self._published,
            "where": str(self.log.latest_path),
        }

    def health(self) -> str:
        """``"ok"``, or why the last attempt to publish failed (a fork is tamper evidence)."""
        error = self.last_error
        if error is None:
            return "ok"
        kind = "FORK" if isinstance(error, ForkError) else type(error).__name__
        return f"{kind}: {error}"

    def readiness(self) -> tuple[str, str | None]:
        """:meth:`health`, and why the kit is not ready because of its checkpoints, if it is not.

        Not ready: after a fork, and when the home's public key (``keys/checkpoint.pub``)
        exists but cannot be read as a verifier key, since no checkpoint could then be checked.
        A failed attempt to publish is retried and does not, on its own, make the kit not ready.
        """
        health = self.health()
        if health.startswith("FORK"):
            return health, f"the log no longer extends its checkpoint: {health}"
        from ._signing import home_verifier  # loads cryptography: only when asked

        try:
            home_verifier(self.home)
        except ConfigurationError as exc:
            return f"KEY: {exc}", f"checkpoints cannot be checked: {exc}"
        return health, None

    def close(self, *, final: bool = True) -> None:
        """Stop the thread and, with ``final``, publish a last checkpoint if the log grew
        (clean shutdown). Nothing is published after a fork (see :meth:`poll_once`), nor from
        a process forked after this checkpointer started (its thread lives in the parent).
        """
        if self.process.inherited:
            return
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
        if not final or isinstance(self.last_error, ForkError):
            return
        try:
            if self._follow() > self._published:
                self.checkpoint()
        except Exception as exc:  # a failed last checkpoint must not lose the close
            self.last_error = exc


def _run(
    checkpointer: weakref.ref[Checkpointer], stop: threading.Event, wake: threading.Event
) -> None:
    while not stop.is_set():
        current = checkpointer()
        if current is None:
            return
        poll = current.poll
        del current  # not held while waiting, so an abandoned kit can be collected
        wake.wait(poll)
        wake.clear()
        current = checkpointer()
        if stop.is_set() or current is None:
            return
        current.poll_once()
        del current
