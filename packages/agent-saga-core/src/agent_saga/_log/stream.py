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
from typing import NamedTuple, Protocol

from .._errors import CorruptLogError
from .chain import Chain
from .files import OS
from .fs import FileSystem
from .ledger import RedactionLedger
from .read import _parts, _sealed_problem, _unjustified, layout_of
from .records import GENESIS
from .scan import scan
from .segments import Layout, Summary
from .store import VerifyReport

OnRecord = Callable[[bytes, bytes, int], None]
"""``(stored line, hash as ASCII hex, offset just after the record across segments)``."""


class Delegated(NamedTuple):
    """A sealed segment verified by a :class:`Farm` from its summary's starting point, with no
    defect, masked value or redaction record in it (a segment with any is read here)."""

    records: int
    seq: int
    hash: str
    """``seq`` and hash of its last record."""
    first_v2: int | None
    """``seq`` of its first version 2 record."""
    fold: Callable[[], None]
    """Hands its records' hashes to the caller's Merkle state: called once the segment is
    accepted (it joins the chain read so far and matches its summary), never otherwise."""


class Farm(Protocol):
    """Verifies sealed segments elsewhere (another process) while the pass reads others."""

    def offer(self, path: str, summary: Summary) -> bool:
        """Start verifying the sealed segment at ``path`` from where ``summary`` says it
        starts; ``False``: it will not, read it here."""

    def take(self, path: str) -> Delegated | None:
        """What verifying ``path`` found (waiting for it); ``None``: read it here."""


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
    farm: Farm | None = None,
) -> VerifyReport:
    """Verify the log whose first segment is ``path``, calling ``on_record`` for each record.

    Never raises for bad content: the first defect is the report's error, after ``on_record``
    was called for every record before it (``records`` counts them, from the resume point when
    there is one). A log that ends before its synced watermark is a defect, as opening a store
    on it would find.

    With a ``farm``, while a segment is read here the next one, when it is sealed, summarised
    and on this disk, is offered to the farm; one it verified clean is accepted only if it
    continues the chain read so far and matches its summary, else it is read here (which
    names any defect at its offset), so the report is the same either way.
    """
    origin, seq, prev = (0, 0, GENESIS) if start is None else start
    if not fs.exists(str(path)):
        return VerifyReport(start is None, 0, _missing(path, start), prev)
    layout = layout_of(path, fs)
    ledger = RedactionLedger()
    count, base = 0, 0
    offered: set[str] = set()
    try:
        for index, part in enumerate(_parts(path, fs, layout)):
            if origin >= base + part.end and not part.active:
                base += part.end  # verified before the resume point: sized, not read
                continue
            local = max(0, origin - base)
            before = (seq, prev)
            offset = base
            done = None if local or part.segment.path not in offered else farm
            delegated = None if done is None else done.take(part.segment.path)
            joins = delegated is not None and (
                _sealed_problem(part, delegated.seq, delegated.hash, before) is None
            )
            if delegated is not None and joins:
                delegated.fold()
                count += delegated.records
                seq, prev = delegated.seq, delegated.hash
                if delegated.first_v2 is not None:
                    ledger.saw_version_2(delegated.first_v2)
                base += part.end
                continue
            if farm is not None:  # read here: the next sealed segment is verified meanwhile
                _offer_next(farm, fs, layout, index + 1, offered)

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


def _offer_next(farm: Farm, fs: FileSystem, layout: Layout, index: int, offered: set[str]) -> None:
    """Offer segment ``index`` to ``farm`` when it is sealed, summarised and on this disk."""
    if fs is not OS or index >= len(layout.segments) - 1:
        return  # the last segment is the open one
    segment, summary = layout.segments[index], layout.summaries[index]
    if summary is None or segment is layout.active or not fs.exists(segment.path):
        return
    if farm.offer(segment.path, summary):
        offered.add(segment.path)


def _missing(path: Path, start: ResumeAt | None) -> CorruptLogError | None:
    if start is None:
        return None
    return CorruptLogError(str(path), 0, "the log is missing", start.seq)
