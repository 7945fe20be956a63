"""The unfinished sagas the saga index names, checked against a signed statement and the log.

Each saga's records state their places, so a record hidden from a saga is caught when the
saga is read (:func:`.sagarows.check_places`); a whole saga left out of the index is not read
at all. :func:`checked_unfinished` therefore rests the list on what the index cannot forge:

1. the latest signed checkpoint's statement of the sagas unfinished after its record ``size``
   (:mod:`.unfinishedset`; the checkpointer computes it from the log): the index's set at
   ``size`` must have its count and digest;
2. the log itself after ``size``: its records are walked (:func:`.indexwalk.walk_for_index`,
   no JSON decoding) and folded into that set.

The index's unfinished sagas must be exactly the sagas unfinished by that account; a saga left
out, or one listed that the account does not hold (a committed saga whose ``saga.end`` row was
deleted, say), raises :class:`IndexMismatch` (callers rebuild the index from the log, then read
the log in full). Without a statement (no checkpoint key, no checkpoint, or one written before the
statement existed) the walk starts at the log's first record: correct, at the cost of a read
of the whole log by the fast walk.

The walk's cost is the records after the latest checkpoint: the kit's checkpointer signs one
every ``checkpoint_every`` records (1,000 by default), every ``checkpoint_interval`` seconds
while the log grows, and at a clean close.
"""

from __future__ import annotations

from .files import LOG_NAME, OS
from .indexpoint import START, IndexMismatch, Point
from .indexwalk import walk_for_index
from .sagaindex import SagaIndex
from .sagarows import ANCHOR, UNFINISHED_AT
from .unfinishedset import Statement, commitment, fold


def unfinished_at(index: SagaIndex, size: int) -> list[str]:
    """Ids of the sagas the index holds as begun and not ended after record ``size``."""
    return [row[0] for row in index.select(UNFINISHED_AT, (size, size, size))]


def anchor(index: SagaIndex, size: int) -> Point:
    """The last indexed record at or before record ``size``, found in the log where the index
    says (the log's start when there is none).

    Raises:
        IndexMismatch: the log does not hold that record there.
    """
    rows = index.select(ANCHOR, (size,))
    if not rows:
        return START
    seq, seg, off, length, prev, digest = rows[0]
    point = Point(seg, off, off + length, seq, bytes(prev).hex(), bytes(digest).hex())
    if not index.continues(point):
        raise IndexMismatch(f"record {seq} is not where the index says")
    return point


def unfinished_through(index: SagaIndex, statement: Statement | None, upto: int) -> list[str]:
    """The sagas begun and not ended in the log's first ``upto`` records (oldest first): the
    index's set at the statement's size, checked against it, then the log's records after it
    (the whole log without a statement). The index must cover the statement's size.

    Raises:
        IndexMismatch: the index's set is not the one the statement signs, or the log ends
            before record ``upto``.
        CorruptLogError: the log's records after that point do not follow each other.
    """
    size = 0 if statement is None else statement.size
    if upto < size:
        raise IndexMismatch(f"record {upto} is before the signed statement's {size}")
    unfinished: dict[str, None] = {}
    if statement is not None:
        claimed = unfinished_at(index, size)
        if commitment(claimed) != (statement.number, statement.digest):
            raise IndexMismatch(
                f"the index's unfinished sagas after record {size} are not the "
                f"{statement.number} the signed checkpoint states"
            )
        unfinished = dict.fromkeys(claimed)
    start = anchor(index, size)
    last = start.seq
    if last < upto:
        walker = walk_for_index(
            index.home / LOG_NAME, OS, first=start.seg, offset=start.end,
            seq=start.seq, prev=start.hash,
        )  # fmt: skip
        try:
            for record in walker:
                last = record.seq
                if last > size:
                    fold(unfinished, record)
                if last >= upto:
                    break
        finally:
            walker.close()
    if last < upto:
        raise IndexMismatch(f"the log ends at record {last}, before record {upto}")
    return list(unfinished)


def checked_unfinished(index: SagaIndex) -> list[str]:
    """The index's unfinished sagas (:meth:`SagaIndex.unfinished`), once they are exactly the
    sagas the statement and the log account for (see the module docstring).

    Raises:
        IndexMismatch: the index leaves out an unfinished saga, lists one the log does not
            hold as unfinished, or does not hold the set the statement signs.
        CorruptLogError: the log after the statement is damaged.
    """
    listed, covered = index.unfinished_covered()
    statement = None if index.statement is None else index.statement()
    if statement is not None and statement.size > covered:
        statement = None  # the index does not reach it yet: the log is read from its start
    accounted = unfinished_through(index, statement, covered)
    known, held = set(accounted), set(listed)
    for saga_id in accounted:
        if saga_id not in held:
            raise IndexMismatch(f"the index leaves out the unfinished saga {saga_id}")
    for saga_id in listed:
        if saga_id not in known:
            raise IndexMismatch(f"the index holds saga {saga_id} as unfinished; the log does not")
    return listed
