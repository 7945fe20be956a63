"""Verifying a file log in one streaming pass, from its first record or from a resume point.

:func:`stream_verify` checks what reading the log as a source checks (the chain over the
stored bytes, every sealed segment against its summary, the open segment against its synced
watermark, every masked value against a signed redaction record) with the fast line check of
:func:`.scan.scan`, and hands each verified record's line and hash to a callback: that is how
the proofs layer builds its Merkle frontier without any record being kept. Memory is bounded
by one chunk of the file and the redaction ledger, whatever the log's size.

A resume point ``(offset, seq, prev)`` says that the records up to ``seq`` were verified
earlier and end at ``offset`` (counted from the start of the first segment, across segments):
the sealed segments that end at or before it are not read (each is still opened for its size,
which places the offset: an archived one costs a metadata request), and the first record read
must be ``seq + 1`` with ``prev`` as its predecessor's hash, so a resume point that does not
match the log fails at once. Masked values and redaction records before the resume point are not
seen, so the ledger checks only those after it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from .._errors import CorruptLogError
from .chain import Chain
from .files import OS
from .fs import FileSystem
from .ledger import RedactionLedger
from .read import _parts, _sealed_problem, _unjustified, layout_of
from .records import GENESIS
from .scan import scan
from .store import VerifyReport

OnRecord = Callable[[bytes, bytes, int], None]
"""``(stored line, hash as ASCII hex, offset just after the record across segments)``."""


class ResumeAt(NamedTuple):
    """Where a verified prefix of the log ends."""

    offset: int
    seq: int
    prev: str


def stream_verify(
    path: Path,
    chain: Chain,
    on_record: OnRecord,
    *,
    fs: FileSystem = OS,
    start: ResumeAt | None = None,
) -> VerifyReport:
    """Verify the log whose first segment is ``path``, calling ``on_record`` for each record.

    Never raises for bad content: the first defect is the report's error, after ``on_record``
    was called for every record before it (``records`` counts them, from the resume point when
    there is one). A log that ends before its synced watermark is a defect, as opening a store
    on it would find.
    """
    origin, seq, prev = (0, 0, GENESIS) if start is None else start
    if not fs.exists(str(path)):
        return VerifyReport(start is None, 0, _missing(path, start), prev)
    layout = layout_of(path, fs)
    ledger = RedactionLedger()
    count, base = 0, 0
    try:
        for part in _parts(path, fs, layout):
            if origin >= base + part.end and not part.active:
                base += part.end  # verified before the resume point: sized, not read
                continue
            local = max(0, origin - base)
            before = (seq, prev)
            offset = base

            def hook(line: bytes, digest: bytes, end: int, _base: int = offset) -> None:
                on_record(line, digest, _base + end)

            tail = scan(
                part.fs, part.fd, chain, part.segment.path, start=local, seq=seq, prev=prev,
                end=part.end, ledger=ledger, on_record=hook,
            )  # fmt: skip
            count += tail.records
            if tail.damage is not None:
                return VerifyReport(False, count, tail.damage, tail.hash)
            seq, prev = tail.seq, tail.hash
            if local == 0:
                problem = _sealed_problem(part, seq, prev, before)
                if problem is not None:
                    return VerifyReport(False, count, problem, prev)
            elif (
                not part.active
                and part.summary is not None
                and (seq, prev) != (part.summary.last, part.summary.hash)
            ):
                problem = CorruptLogError(
                    part.segment.path, part.end,
                    f"sealed segment ends at seq {seq}, its summary says {part.summary.last}", seq,
                )  # fmt: skip
                return VerifyReport(False, count, problem, prev)
            if part.active and tail.end < part.synced:
                problem = CorruptLogError(
                    part.segment.path, tail.end,
                    f"log ends at {tail.end} bytes but {part.synced} bytes were synced: "
                    "records were removed", seq + 1,
                )  # fmt: skip
                return VerifyReport(False, count, problem, prev)
            base += part.end
    except CorruptLogError as exc:
        return VerifyReport(False, count, exc, prev)
    except OSError as exc:
        return VerifyReport(False, count, CorruptLogError(str(path), 0, f"unreadable: {exc}"), prev)
    if start is not None and base < origin:
        problem = CorruptLogError(
            str(path), base, f"the log ends at {base} bytes, before the point verified earlier "
            f"({origin} bytes, seq {start.seq}): records were removed", start.seq,
        )  # fmt: skip
        return VerifyReport(False, count, problem, prev)
    problem = _unjustified(ledger, layout)
    return VerifyReport(problem is None, count, problem, prev)


def _missing(path: Path, start: ResumeAt | None) -> CorruptLogError | None:
    if start is None:
        return None
    return CorruptLogError(str(path), 0, "the log is missing", start.seq)
