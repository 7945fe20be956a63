"""Verifying sealed segments in a second process while the pass reads the others (2 cores).

A sealed segment's summary says where its chain starts (the seq and hash before its first
record), so it can be checked without the segments before it: :class:`SegmentFarm` hands the
next sealed segment to one worker process while the pass reads the current one here, and
:func:`verify_segment` (run by the worker) checks it exactly as the pass would (the same fast
line check, from the summary's start) and returns, besides where its chain ends, the roots of
the complete Merkle subtrees that tile its leaves. The pass accepts the answer only once the
segment is known to continue the chain read so far and to match its summary (see
:func:`agent_saga._log.stream.stream_verify`), then appends those subtrees to its frontier:
the same root as appending every leaf, since they are nodes of the same tree.

The worker answers ``None`` for anything but a clean segment (a defect, a masked value, a
redaction record, an unreadable file): such a segment is read again here, which names the
defect at its offset and feeds the redaction ledger, so the pass's report never depends on
whether a worker was used. A segment is farmed only when it is large enough to be worth a
process (spawning one costs a few hundred milliseconds) and holds none of the sizes the pass
must capture (a checkpoint's state needs the frontier record by record).
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Collection
from concurrent.futures import Future, ProcessPoolExecutor
from types import TracebackType

from .._log.chain import Chain
from .._log.files import OS, open_read
from .._log.ledger import RedactionLedger
from .._log.redaction import REDACTION_KIND
from .._log.scan import scan
from .._log.segments import Summary
from .._log.stream import Delegated
from ._frontier import MerkleFrontier

MIN_SEGMENT_BYTES = 16 << 20
"""Smaller sealed segments are read here: a worker would cost more than it saves."""
_REDACTION_TAIL = b',"kind":"' + REDACTION_KIND.encode() + b'","prev":'
_BATCH = 256

Found = tuple[int, int, str, int | None, list[tuple[bytes, int]]]
"""``(records, last seq, last hash, first version 2 seq, [(subtree root, height)])`` of a clean
segment."""


def tiling(start: int, end: int) -> list[tuple[int, int]]:
    """``(first leaf, height)`` of the largest complete subtrees that tile leaves
    ``[start, end)`` of an RFC 9162 tree, in order (each starts at a multiple of its width)."""
    blocks = []
    while start < end:
        height = (start & -start).bit_length() - 1 if start else (end - start).bit_length()
        while start + (1 << height) > end:
            height -= 1
        blocks.append((start, height))
        start += 1 << height
    return blocks


class _Tiler:
    """Builds the subtrees of :func:`tiling` from record hashes, a batch at a time."""

    def __init__(self, start: int, end: int) -> None:
        self.blocks = tiling(start, end)
        self.roots: list[tuple[bytes, int]] = []
        self.overflow = False
        self._frontier = MerkleFrontier()

    def add(self, digests: list[bytes]) -> None:
        blocks, roots = self.blocks, self.roots
        at = 0
        while at < len(digests):
            if len(roots) >= len(blocks):
                self.overflow = True  # more records than the summary says
                return
            height = blocks[len(roots)][1]
            room = (1 << height) - self._frontier.size
            self._frontier.append_chain_hashes(digests[at : at + room])
            at += room
            if self._frontier.size == 1 << height:
                roots.append((self._frontier.hashes[0], height))
                self._frontier = MerkleFrontier()


def verify_segment(path: str, key: bytes | None, summary: Summary) -> Found | None:
    """Check the sealed segment at ``path`` against ``summary`` from its starting point; the
    subtrees of its records' leaves. ``None``: anything but a clean segment (read it again)."""
    tiler = _Tiler(summary.first - 1, summary.last)
    pending: list[bytes] = []
    special = [False]

    def on_record(line: bytes, digest: bytes, _end: int) -> None:
        if _REDACTION_TAIL in line:
            special[0] = True
        pending.append(digest)
        if len(pending) >= _BATCH:
            tiler.add(pending)
            pending.clear()

    try:
        fd = open_read(OS, path)
    except OSError:
        return None
    try:
        ledger = RedactionLedger()
        tail = scan(
            OS, fd, Chain(key), path, seq=summary.first - 1, prev=summary.prev,
            end=summary.size, ledger=ledger, on_record=on_record,
        )  # fmt: skip
    except OSError:
        return None
    finally:
        OS.close(fd)
    tiler.add(pending)
    held = ledger.pending or ledger.pending_leaves or ledger.unsigned or ledger.in_place
    clean = tail.damage is None and not special[0] and not held and not tiler.overflow
    if not clean or len(tiler.roots) != len(tiler.blocks):
        return None
    return tail.records, tail.seq, tail.hash, ledger.first_v2, tiler.roots


class SegmentFarm:
    """A :class:`agent_saga._log.stream.Farm` of one worker process, feeding the frontier
    ``frontier()`` returns (up to date with every record read here when it is called).

    Use as a context manager: the worker is started on the first segment offered and stopped
    (waiting for what it is doing) on exit.
    """

    def __init__(
        self,
        frontier: Callable[[], MerkleFrontier],
        key: bytes | None,
        capture: Collection[int] = (),
        min_bytes: int = MIN_SEGMENT_BYTES,
    ) -> None:
        self._frontier = frontier
        self._key = key
        self._capture = sorted(capture)
        self._min_bytes = min_bytes
        self._pool: ProcessPoolExecutor | None = None
        self._jobs: dict[str, tuple[Summary, Future[Found | None]]] = {}

    def __enter__(self) -> SegmentFarm:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def offer(self, path: str, summary: Summary) -> bool:
        if summary.size < self._min_bytes or _cores() < 2:
            return False
        if any(summary.first <= size <= summary.last for size in self._capture):
            return False
        try:
            if self._pool is None:
                context = multiprocessing.get_context("spawn")  # no fork of a threaded process
                self._pool = ProcessPoolExecutor(max_workers=1, mp_context=context)
            job = self._pool.submit(verify_segment, path, self._key, summary)
        except (OSError, RuntimeError):  # no process to be had (a broken pool is a RuntimeError)
            return False
        self._jobs[path] = (summary, job)
        return True

    def take(self, path: str) -> Delegated | None:
        summary, job = self._jobs.pop(path)
        try:
            found = job.result()
        except Exception:  # a worker that died or failed: the segment is read here
            return None
        if found is None:
            return None
        records, seq, last, first_v2, roots = found
        start, current = summary.first - 1, self._frontier

        def fold() -> None:
            frontier = current()
            if frontier.size != start:
                raise AssertionError(f"segment at leaf {start}, frontier at {frontier.size}")
            for node, height in roots:
                frontier.append_subtree(node, height)

        return Delegated(records, seq, last, first_v2, fold)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
