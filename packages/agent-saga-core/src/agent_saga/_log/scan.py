"""Reading a log file: bounded-memory line reading and chain verification that never raises.

Every defect in the bytes (a missing newline, an over-long line, invalid UTF-8, deep nesting,
a claimed length, a broken chain) comes back as a :class:`CorruptLogError` value naming the
byte offset; nothing else escapes from a scan.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import NamedTuple

from .._errors import CorruptLogError
from .chain import _KEYS, MAX_RECORD_BYTES, Chain, ChainBreak, Masked, check_line_fast, parse_line
from .codec import CodecError, decode
from .fs import FileSystem
from .ledger import RedactionLedger
from .records import GENESIS, Record
from .redaction import REDACTION_KIND

CHUNK = 1 << 20


class Tail(NamedTuple):
    """Where a scan stopped."""

    records: int
    """Valid records read in this scan."""
    seq: int
    """``seq`` of the last valid record (0 when none)."""
    hash: str
    """Hash of the last valid record (:data:`GENESIS` when none)."""
    end: int
    """Byte offset just after the last valid record."""
    size: int
    """Where the log's bytes end: ``end`` unless there is damage (preallocated zero bytes after
    the last record are free space, not part of the log)."""
    damage: CorruptLogError | None


def iter_lines(fs: FileSystem, fd: int, start: int, end: int) -> Iterator[tuple[int, bytes]]:
    """Yield ``(offset, line)`` for the bytes in ``[start, end)``, newline included.

    A final piece without a newline is yielded as is. A line longer than
    :data:`MAX_RECORD_BYTES` is yielded truncated to ``MAX_RECORD_BYTES + 1`` bytes (without a
    newline) and ends the iteration, so memory stays bounded whatever the file holds.
    """
    buf, base, i, pos = b"", start, 0, start
    while True:
        newline = buf.find(b"\n", i)
        if newline >= 0:
            yield base + i, buf[i : newline + 1]
            i = newline + 1
            continue
        if len(buf) - i > MAX_RECORD_BYTES:
            yield base + i, buf[i : i + MAX_RECORD_BYTES + 1]
            return
        chunk = fs.pread(fd, min(CHUNK, end - pos), pos) if pos < end else b""
        if not chunk:
            if i < len(buf):
                yield base + i, buf[i:]
            return
        pos += len(chunk)
        buf, base, i = buf[i:] + chunk, base + i, 0


def walk(
    fs: FileSystem,
    fd: int,
    chain: Chain,
    where: str,
    *,
    start: int = 0,
    seq: int = 0,
    prev: str = GENESIS,
    end: int | None = None,
    ledger: RedactionLedger | None = None,
) -> Iterator[tuple[int, int, Record]]:
    """Yield ``(offset, length, record)`` for each valid record from byte ``start``.

    ``start`` must follow record ``seq`` whose hash is ``prev``. A ``ledger`` given by the
    caller carries masked values across files (the segments of one log): the caller then checks
    that each was justified once the last file was read.

    Raises:
        CorruptLogError: at the first defect, after yielding every record before it.
    """
    size = fs.size(fd) if end is None else end
    shared = ledger is not None
    ledger = RedactionLedger() if ledger is None else ledger
    for offset, line in iter_lines(fs, fd, start, size):
        if line[:1] == b"\x00":  # the preallocated space after the last record
            if all_zero(fs, fd, offset, size):
                break
            raise CorruptLogError(where, offset, "bytes after the end of the log", seq + 1)
        if not line.endswith(b"\n"):
            reason = (
                f"record longer than {MAX_RECORD_BYTES} bytes"
                if len(line) > MAX_RECORD_BYTES
                else "incomplete final record (no newline)"
            )
            raise CorruptLogError(where, offset, reason, seq + 1)
        result = parse_line(chain, line[:-1], seq + 1, prev, allow_masked=True)
        if isinstance(result, ChainBreak):
            raise CorruptLogError(where, offset, result.reason, seq + 1)
        masked = isinstance(result, Masked)
        if isinstance(result, Masked):
            assert result.record is not None
            if result.leaves:
                ledger.hold_leaves(result.seq, offset, result.leaves)
            else:
                ledger.hold(result.seq, offset, line[:-1])
            result = result.record
        if result.v != 1 and ledger.first_v2 is None:
            ledger.saw_version_2(result.seq)
        if not masked and result.kind == REDACTION_KIND:
            problem = ledger.justify(result.seq, result.prev, result.data, offset)
            if problem is not None:
                raise CorruptLogError(where, offset, problem, result.seq)
        yield offset, len(line), result
        seq, prev = result.seq, result.hash
    if shared:
        return
    unjustified = ledger.first_unjustified()
    if unjustified is not None:
        bad_seq, bad_offset, why = unjustified
        raise CorruptLogError(where, bad_offset, why, bad_seq)


def scan(
    fs: FileSystem,
    fd: int,
    chain: Chain,
    where: str,
    *,
    start: int = 0,
    seq: int = 0,
    prev: str = GENESIS,
    end: int | None = None,
    ledger: RedactionLedger | None = None,
    on_record: Callable[[bytes, bytes, int], None] | None = None,
) -> Tail:
    """Verify records from byte ``start`` (which follows record ``seq`` with hash ``prev``).

    Checks framing, ``seq``, the ``prev`` links and every hash over the stored bytes (see
    :func:`check_line_fast`); stops at the first defect and reports it in
    :attr:`Tail.damage`. Never raises for content. With a ``ledger`` from the caller (one log
    read file by file), masked values are left for the caller to check as :func:`walk` does.
    ``on_record(line, hash, end)`` is called for each record that verified, in order, with its
    stored line (no newline), its hash as ASCII hex and the offset just after it.
    """
    size = fs.size(fd) if end is None else end
    count, position, last = 0, start, prev.encode("ascii")
    pending, read_to = b"", start
    shared = ledger is not None
    ledger = RedactionLedger() if ledger is None else ledger
    before: dict[int, tuple[int, int, bytes]] = {}  # masked or redaction seq -> state before it

    def broken(reason: str) -> Tail:
        damage = CorruptLogError(where, position, reason, seq + 1)
        return Tail(count, seq, last.decode(), position, size, damage)

    def finish(tail: Tail) -> Tail:
        unjustified = None if shared else ledger.first_unjustified()
        if unjustified is None:
            return tail
        bad_seq, offset, why = unjustified
        good, good_seq, good_hash = before[bad_seq]
        damage = CorruptLogError(where, offset, why, bad_seq)
        return Tail(good, good_seq, good_hash.decode(), offset, size, damage)

    def free_space() -> Tail:
        if not all_zero(fs, fd, position, size):
            return broken("bytes after the end of the log (in its preallocated space)")
        return finish(Tail(count, seq, last.decode(), position, position, None))

    while read_to < size:
        chunk = fs.pread(fd, min(CHUNK, size - read_to), read_to)
        if not chunk:
            break
        read_to += len(chunk)
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop()  # the piece after the last newline (usually empty)
        for line in lines:
            if line[:1] == b"\x00":
                return free_space()
            if len(line) >= MAX_RECORD_BYTES:
                return broken(f"record longer than {MAX_RECORD_BYTES} bytes")
            result = check_line_fast(chain, line, seq + 1, last)
            if isinstance(result, ChainBreak):
                return broken(result.reason)
            if isinstance(result, Masked):
                before[result.seq] = (count, seq, last)
                if result.leaves:
                    ledger.hold_leaves(result.seq, position, result.leaves)
                    if ledger.first_v2 is None:
                        ledger.saw_version_2(result.seq)
                else:
                    ledger.hold(result.seq, position, line)
                result = (result.seq, result.hash)
            else:
                if ledger.first_v2 is None and line.endswith(_V2_END):
                    ledger.saw_version_2(seq + 1)
                if _REDACTION_TAIL in line:
                    before[seq + 1] = (count, seq, last)
                    problem = _justify(ledger, line, position)
                    if problem is not None:
                        return broken(problem)
            count, (seq, last), position = count + 1, result, position + len(line) + 1
            if on_record is not None:
                on_record(line, last, position)
        if pending[:1] == b"\x00":
            return free_space()
        if len(pending) > MAX_RECORD_BYTES:
            return broken(f"record longer than {MAX_RECORD_BYTES} bytes")
    if pending or position < size:
        return broken("incomplete final record (no newline)")
    return finish(Tail(count, seq, last.decode(), position, size, None))


_REDACTION_TAIL = b',"kind":"' + REDACTION_KIND.encode() + b'","prev":'
_V2_END = b',"v":2}'


def _justify(ledger: RedactionLedger, line: bytes, offset: int) -> str | None:
    """Apply a ``log.redaction`` record found by the fast scan (rare: decoded in full; its
    hash and position were checked already)."""
    try:
        obj = decode(line)
    except CodecError as exc:
        return f"redaction record is not valid JSON: {exc}"
    data = obj.get("data") if isinstance(obj, dict) else None
    if not isinstance(data, dict) or obj.get("kind") != REDACTION_KIND:
        return "malformed redaction record"
    return ledger.justify(obj["seq"], obj["prev"], data, offset)


def all_zero(fs: FileSystem, fd: int, start: int, end: int) -> bool:
    """Whether ``[start, end)`` holds only zero bytes (the log's preallocated free space)."""
    position = start
    while position < end:
        chunk = fs.pread(fd, min(CHUNK, end - position), position)
        if not chunk:
            return True
        if chunk.strip(b"\x00"):
            return False
        position += len(chunk)
    return True


def content_end(fs: FileSystem, fd: int, size: int) -> int:
    """Offset just after the last non-zero byte before ``size`` (the preallocated zeros that
    follow the log's last record are not content)."""
    position = size
    while position > 0:
        start = max(0, position - CHUNK // 16)
        chunk = fs.pread(fd, position - start, start).rstrip(b"\x00")
        if chunk:
            return start + len(chunk)
        position = start
    return 0


def looks_like_record_after(fs: FileSystem, fd: int, start: int, end: int) -> int | None:
    """Offset of the first line in ``[start, end)`` after the first one that has a record's shape.

    Used to tell a torn tail (nothing but debris after the damage) from damage in the middle
    of the log (records follow it), which must never be cut off.
    """
    lines = iter_lines(fs, fd, start, end)
    next(lines, None)  # the damaged line itself
    for offset, line in lines:
        if not line.endswith(b"\n"):
            return None
        try:
            obj = decode(line[:-1])
        except CodecError:
            continue
        if isinstance(obj, dict) and obj.keys() == _KEYS:
            return offset
    return None
