"""Views of sagas read through the saga index: one saga, a page of the newest, the unfinished.

Invariants:

* Each answer equals the one a full scan of the log gives (:func:`build_history` over every
  record): a view is built by the same code from the saga's records, which the index reads
  back and verifies; the index only narrows which sagas are read, and a filter it cannot
  decide exactly (a status) is applied to the built views.
* The index is caught up with the log before it is asked (:meth:`SagaIndex.refresh`). When a
  record read through it does not verify, it is rebuilt from the log and asked again once;
  :class:`IndexMismatch` escapes only if the rebuilt index fails too, and callers then read
  the log in full.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from .._log.indexsets import checked_unfinished
from .._log.records import SagaStatus
from .._log.sagaindex import IndexMismatch, SagaIndex
from .build import build_history
from .lookup import resolve_saga_id
from .views import AmbiguousSagaError, SagaView, UnknownSagaError

T = TypeVar("T")
PAGE = 200
"""Sagas asked of the index at a time while a page is filled."""
CHECKED_CANDIDATES = 16
"""Candidates of an ambiguous prefix read and verified before the ambiguity is reported."""
_OPEN = frozenset({SagaStatus.RUNNING, SagaStatus.SUSPENDED})


def with_rebuild(index: SagaIndex, answer: Callable[[], T]) -> T:
    """``answer()`` after catching the index up; rebuilt and asked again once if it does not
    describe the log.

    Raises:
        IndexMismatch: the rebuilt index does not describe the log either.
    """
    index.refresh()
    try:
        return answer()
    except IndexMismatch:
        index.rebuild()
        return answer()


def saga_view(index: SagaIndex, saga_id: str) -> SagaView | None:
    """The view of the saga ``saga_id`` (an exact id), or ``None`` when the log has none."""
    found = build_history(index.saga_records(saga_id)).sagas
    return next((view for view in found if view.id == saga_id), None)


def resolve_indexed(index: SagaIndex, id_or_prefix: str) -> str:
    """The id an id or unique prefix names among the index's sagas, as
    :func:`.lookup.resolve_saga_id` finds it among a full history's. A "no" is checked before
    it is given: an ambiguity is only believed once each candidate (up to
    :data:`CHECKED_CANDIDATES`) was read and verified, and an unknown id only if the index's
    ``records`` table holds no row of a saga it names (a scan of that table, on a miss only).
    A prefix that names one saga is checked against the rows of other sagas starting with it
    as typed (an index probe; typed in another case or without dashes, a line deleted from
    the ``sagas`` table can make it name one saga of several until ``verify`` finds the
    line missing, or the index is rebuilt).

    Raises:
        UnknownSagaError: nothing matches.
        AmbiguousSagaError: several ids start with the text.
        IndexMismatch: the index does not describe the log.
    """
    ids, total = index.matching(id_or_prefix)
    try:
        chosen = resolve_saga_id(ids, id_or_prefix, total=total)
    except AmbiguousSagaError as exc:
        for saga_id in exc.candidates[:CHECKED_CANDIDATES]:
            if not any(r.saga == saga_id for r in index.saga_records(saga_id)):
                raise IndexMismatch(f"the index names saga {saga_id}, the log has none") from None
        raise
    except UnknownSagaError:
        if index.holds_records_of(id_or_prefix):
            problem = f"the index holds records of {id_or_prefix!r} but no saga"
            raise IndexMismatch(problem) from None
        raise
    if chosen != id_or_prefix.strip() and index.holds_records_of(
        id_or_prefix, besides=chosen, typed_only=True
    ):
        raise IndexMismatch(f"the index holds records of another saga {id_or_prefix!r} names")
    return chosen


def find_indexed(index: SagaIndex, id_or_prefix: str) -> SagaView:
    """The saga an id or unique prefix names, as :func:`agent_saga._history.lookup.find_saga`
    finds it in a full history.

    Raises:
        UnknownSagaError: nothing matches.
        AmbiguousSagaError: several ids start with the text.
        IndexMismatch: the index does not describe the log (see :func:`with_rebuild`).
    """

    def answer() -> SagaView:
        saga_id = resolve_indexed(index, id_or_prefix)
        view = saga_view(index, saga_id)
        if view is None:
            raise IndexMismatch(f"the index names saga {saga_id} but holds none of its records")
        return view

    return with_rebuild(index, answer)


def newest_views(
    index: SagaIndex,
    *,
    limit: int,
    since: int | None = None,
    status: SagaStatus | None = None,
) -> list[SagaView]:
    """Up to ``limit`` sagas, newest first (by their first record), that began at or after
    ``since`` (milliseconds) and have ``status``: the head of the full history's sagas,
    reversed and filtered the same way.

    Raises:
        IndexMismatch: the index does not describe the log (see :func:`with_rebuild`).
    """
    ended: bool | None = None if status is None else status not in _OPEN
    end_status = (
        status.value
        if status is not None and status not in _OPEN and status is not SagaStatus.NEEDS_HUMAN
        else None
    )

    def answer() -> list[SagaView]:
        views: list[SagaView] = []
        before: int | None = None
        while len(views) < limit:
            page = index.newest(
                limit=PAGE, before=before, since=since, ended=ended, end_status=end_status
            )
            for saga_id, first_seq in page:
                before = first_seq
                view = saga_view(index, saga_id)
                if view is None:
                    raise IndexMismatch(f"the index names saga {saga_id} but not its records")
                if status is None or view.status is status:
                    views.append(view)
                    if len(views) == limit:
                        break
            if len(page) < PAGE:
                break
        return views

    return with_rebuild(index, answer)


def unfinished_views(index: SagaIndex) -> list[SagaView]:
    """Every saga with no ``saga.end`` (running or suspended), oldest first: what recovery
    looks at, read in time proportional to those sagas and to the records after the latest
    signed statement of the unfinished sagas (:func:`.checked_unfinished`: an index that
    leaves a whole unfinished saga out is not believed, nor one that shows an ended saga as
    unfinished by leaving out its ``saga.end``).

    Raises:
        IndexMismatch: the index does not describe the log (see :func:`with_rebuild`).
    """

    def answer() -> list[SagaView]:
        views = []
        for saga_id in checked_unfinished(index):
            records = index.saga_records(saga_id)
            view = next((v for v in build_history(records).sagas if v.id == saga_id), None)
            if view is None or view.status not in _OPEN:
                raise IndexMismatch(f"the index holds saga {saga_id} as unfinished; it is not")
            views.append(view)
        return views

    return with_rebuild(index, answer)
