"""One streaming pass over a log: the chain verified, the Merkle frontier built, no record kept.

:func:`stream_log` reads a log source once and returns a :class:`StreamedLog`: the chain
report, the frontier (O(log n) hashes), the roots at the sizes asked for (the checkpoints the
log is compared with) with the state there (to store as a resume point), and the redaction
records (few). Memory stays bounded whatever the log's size. A file log is read with the fast
line check (:func:`agent_saga._log.stream.stream_verify`); another source through its verified
records.

With a resume point, a file log is read only after it: the frontier starts from the point's,
and the records read must continue the chain from its record. A point that does not match the
log (records cut or rewritten there, or the file rewritten by a redaction) is not an error of
the log: the pass starts again from the first record and says why.

Asked to (``unfinished``, for a pass whose head will be signed), the pass also counts the sagas
unfinished after its last record (:mod:`agent_saga._log.unfinishedset`) from the records it
reads. After a resume point it starts from the set that the point's own signed checkpoint
states (``unfinished`` finds it, checked against that statement); a point whose checkpoint
states none, or whose set cannot be found, is not used: the pass reads from the first record.
"""

from __future__ import annotations

from binascii import unhexlify
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import NamedTuple

from .._errors import CorruptLogError
from .._log.chain import Chain, parse_line
from .._log.indexwalk import kind_and_saga
from .._log.records import GENESIS, Record
from .._log.redaction import REDACTION_KIND
from .._log.source import ChainKeyError, FileLogSource, LogSource, explain_first_record
from .._log.store import VerifyReport
from .._log.stream import ResumeAt, stream_verify
from .._log.unfinishedset import fold, fold_kind
from ._farm import SegmentFarm
from ._frontier import MerkleFrontier
from ._logtree import record_leaf
from ._merkle import leaf_hash
from ._resume import Captured, ResumePoint

_REDACTION_TAIL = b',"kind":"' + REDACTION_KIND.encode() + b'","prev":'
_BATCH = 256


@dataclass
class StreamedLog:
    """What one pass found (see the module docstring)."""

    chain: VerifyReport
    """``records`` counts every record up to the first break, including those before the
    resume point."""
    frontier: MerkleFrontier
    roots: dict[int, bytes] = field(default_factory=dict)
    states: dict[int, Captured] = field(default_factory=dict)
    redactions: list[Record] = field(default_factory=list)
    resumed_from: int = 0
    """Records taken from a resume point without reading them (0: read from the first)."""
    notes: list[str] = field(default_factory=list)
    unfinished: dict[str, None] | None = None
    """The sagas unfinished after the records that verified, oldest first, when the pass was
    asked to count them (``None``: not asked, or a record could not be read for it)."""

    @property
    def size(self) -> int:
        return self.frontier.size


Observer = Callable[[int, bytes, bytes, str], None]
"""``(leaf index, stored line, hash as ASCII hex, previous record's hash)`` of each verified
record of a file log, called before its leaf is appended to the frontier."""

LineHook = Callable[[bytes, bytes], None]
"""``(stored line, previous record's hash as ASCII hex)`` of each verified record of a file
log, in order (the frontier is not brought up to date for it, unlike :data:`Observer`)."""


class _Hooks(NamedTuple):
    observer: Observer | None
    on_line: LineHook | None


StartSet = Callable[[ResumePoint], list[str] | None]
"""The sagas unfinished at a resume point, as its checkpoint's signed statement states them
(checked against it); ``None`` when it states none or they cannot be found."""


def stream_log(
    source: LogSource,
    capture: Collection[int] = (),
    resume: ResumePoint | None = None,
    farm_bytes: int | None = None,
    *,
    frontier: MerkleFrontier | None = None,
    observer: Observer | None = None,
    unfinished: StartSet | None = None,
    each: Callable[[Record], None] | None = None,
    on_line: LineHook | None = None,
) -> StreamedLog:
    """Read ``source`` once (after ``resume`` when given and usable; see the module docstring).

    With ``farm_bytes`` (for example :data:`~._farm.MIN_SEGMENT_BYTES`), sealed segments of at
    least that many bytes are verified in a second process while this one reads the others,
    when there are two cores (see :mod:`._farm`): same report. Off by default: the worker is a
    ``spawn`` process, which imports the caller's ``__main__`` again (a script without a
    ``__main__`` guard would run twice), and no quiet measurement has shown it faster yet.
    ``frontier`` (empty) is the one to build, for a caller that collects nodes as it grows;
    ``observer`` sees each record of a file log (see :data:`Observer`) with the frontier up to
    date, and turns the second process off (every leaf is then appended here). With
    ``unfinished`` the pass counts the unfinished sagas (see the module docstring) and reads
    every record here (no second process). With ``each``, the log is read through its verified
    records from the first one (``resume`` is not used), each handed to ``each`` in order; no
    stored line is seen then, so ``observer`` and ``each`` together are refused. ``on_line``
    sees each stored line of a file log (see :data:`LineHook`; ignored for another source) and
    also turns the second process off.

    Raises:
        ValueError: both ``observer`` and ``each`` were given.
        ChainKeyError: record 1 does not verify with the chain key given (a key problem).
        StoreFailedError: the store cannot be read.
    """
    if observer is not None and each is not None:
        raise ValueError("stream_log takes an observer or each, not both")
    sizes = frozenset(capture)
    counted: dict[str, None] | None = None if unfinished is None else {}
    if each is not None or not isinstance(source, FileLogSource):
        log = _stream_records(source, sizes, frontier or MerkleFrontier(), counted, each)
        if resume is not None:
            log.notes.append("this log cannot be resumed: it was read from its first record")
        return log
    if observer is not None or unfinished is not None or on_line is not None:
        farm_bytes = 1 << 62
    hooks = _Hooks(observer, on_line)
    why = "the log no longer continues the resume point"
    if resume is not None:
        start = None if unfinished is None else unfinished(resume)
        if unfinished is None or start is not None:
            at = None if start is None else dict.fromkeys(start)
            resumed = _stream_file(source, sizes, resume, farm_bytes, None, hooks, at)
            if resumed is not None:
                return resumed
        else:
            why = "no unfinished sagas checked against a statement signed at the resume point"
    full = _stream_file(source, sizes, None, farm_bytes, frontier, hooks, counted)
    assert full is not None
    if resume is not None:
        full.notes.insert(0, f"{why} at record {resume.state.size}: read from its first record")
    return full


def _stream_file(
    source: FileLogSource,
    sizes: frozenset[int],
    resume: ResumePoint | None,
    farm_bytes: int | None,
    empty: MerkleFrontier | None,
    hooks: _Hooks,
    unfinished: dict[str, None] | None,
) -> StreamedLog | None:
    """The pass over a file log; ``None`` when ``resume`` does not match the log.
    ``unfinished`` (the set at the pass's start) is folded as the records are read."""
    if resume is None:
        frontier, start, last = empty or MerkleFrontier(), None, GENESIS
    else:
        state = resume.state
        frontier = MerkleFrontier(state.size, list(state.frontier))
        start, last = ResumeAt(state.offset, state.size, state.hash), state.hash
    log = StreamedLog(VerifyReport(True, 0), frontier, resumed_from=frontier.size)
    log.unfinished = unfinished
    if resume is not None:
        log.roots[resume.state.size] = resume.checkpoint.root  # confirmed by the point's check
    chain = Chain(source.key)
    previous = [last.encode()]
    pending: list[bytes] = []  # hashes of records read, not yet in the frontier

    def current() -> MerkleFrontier:
        frontier.append_chain_hashes(pending)
        pending.clear()
        return frontier

    observer, on_line = hooks

    def on_record(line: bytes, digest: bytes, end: int) -> None:
        if observer is not None:
            observer(current().size, line, digest, previous[0].decode())
        if on_line is not None:
            on_line(line, previous[0])
        size = frontier.size + len(pending) + 1
        if size in sizes:
            edge = current().append_with_edge(leaf_hash(unhexlify(digest)))
            log.roots[size] = frontier.root()
            log.states[size] = Captured(size, frontier.hashes, edge, digest.decode(), end)
        else:
            pending.append(digest)
            if len(pending) >= _BATCH or observer is not None:
                current()
        if log.unfinished is not None:
            _count(log.unfinished, line, log)
        if _REDACTION_TAIL in line:
            parsed = parse_line(chain, line, size, previous[0].decode(), allow_masked=True)
            if isinstance(parsed, Record) and parsed.kind == REDACTION_KIND:
                log.redactions.append(parsed)
        previous[0] = digest

    with SegmentFarm(
        current, source.key, sizes, min_bytes=1 << 62 if farm_bytes is None else farm_bytes
    ) as farm:
        report = stream_verify(source.path, chain, on_record, start=start, farm=farm)
    current()
    if resume is not None and report.records == 0 and report.error is not None:
        return None  # the first record after the point does not continue it
    total = log.resumed_from + report.records
    error = report.error
    if error is not None and log.resumed_from == 0:
        error = explain_first_record(error, source)
        if isinstance(error, ChainKeyError):
            raise error
    log.chain = VerifyReport(error is None, total, error, report.last_hash)
    return log


def _count(unfinished: dict[str, None], line: bytes, log: StreamedLog) -> None:
    """Fold the verified record stored as ``line`` into ``unfinished``, the set ``log``
    counts; a line not in the form read here (none the chain accepts) stops the count."""
    fields = kind_and_saga(line)
    if fields is None:
        log.unfinished = None
    else:
        fold_kind(unfinished, *fields)


def _stream_records(
    source: LogSource,
    sizes: frozenset[int],
    frontier: MerkleFrontier,
    unfinished: dict[str, None] | None,
    each: Callable[[Record], None] | None = None,
) -> StreamedLog:
    log = StreamedLog(VerifyReport(True, 0), frontier, unfinished=unfinished)
    head, error = GENESIS, None
    try:
        for record in source.records():
            size = frontier.size + 1
            if size in sizes:
                edge = frontier.append_with_edge(record_leaf(record))
                log.roots[size] = frontier.root()
                log.states[size] = Captured(size, frontier.hashes, edge, record.hash, -1)
            else:
                frontier.append_chain_hash(record.hash.encode())
            head = record.hash
            if unfinished is not None:
                fold(unfinished, record)
            if record.kind == REDACTION_KIND:
                log.redactions.append(record)
            if each is not None:
                each(record)
    except ChainKeyError:
        raise
    except CorruptLogError as exc:
        error = exc  # the records before the break still count
    log.chain = VerifyReport(error is None, frontier.size, error, head)
    return log
