"""Reading one saga, or the unfinished ones, from a store in time proportional to them.

A file store reads through its saga index (:mod:`agent_saga._log.sagaindex`), a store that
answers such questions itself (the PostgreSQL store: :class:`SagaQueries`) asks its server, and
any other store (the memory store, a file store on a simulated file system) is read in full.
Each way gives the same records, in log order, verified as the store verifies them; a file
store whose index cannot answer (see :func:`agent_saga._history.indexed.with_rebuild`) is read
in full, which raises what is wrong with the log.
"""

from __future__ import annotations

import sqlite3
from typing import Protocol, runtime_checkable

from .._errors import CorruptLogError
from .._log.records import Record
from .._log.sagaindex import IndexMismatch, SagaIndex
from .._log.store import LogStore
from .build import sagas
from .indexed import saga_view, unfinished_views, with_rebuild
from .views import SagaView

_FALLBACK = (IndexMismatch, CorruptLogError, sqlite3.Error, OSError)


@runtime_checkable
class SagaQueries(Protocol):
    """A store that finds a saga's records, and the unfinished sagas, without a full read."""

    def saga_records(self, saga_id: str) -> list[Record]:
        """The records of ``saga_id``, in ``seq`` order, verified."""
        ...

    def unfinished_saga_ids(self) -> list[str]:
        """Ids of the sagas with no ``saga.end``, in order of their first record."""
        ...


def _index_of(store: LogStore) -> SagaIndex | None:
    index = getattr(store, "saga_index", None)
    return index if isinstance(index, SagaIndex) else None


def own_records(store: LogStore, saga_id: str) -> list[Record]:
    """The records of ``saga_id`` (``record.saga == saga_id``), in log order."""
    index = _index_of(store)
    if index is not None:
        try:
            found = with_rebuild(index, lambda: index.saga_records(saga_id))
            return [r for r in found if r.saga == saga_id]
        except _FALLBACK:
            pass
    elif isinstance(store, SagaQueries):
        return store.saga_records(saga_id)
    return [r for r in store.records() if r.saga == saga_id]


def unfinished_sagas(store: LogStore) -> list[SagaView]:
    """The views of every saga without a ``saga.end``, oldest first (as the full history's
    RUNNING and SUSPENDED sagas)."""
    index = _index_of(store)
    if index is not None:
        try:
            return unfinished_views(index)
        except _FALLBACK:
            pass
    elif isinstance(store, SagaQueries):
        views: list[SagaView] = []
        for saga_id in store.unfinished_saga_ids():
            views.extend(v for v in sagas(store.saga_records(saga_id)) if v.ended is None)
        return views
    return [v for v in sagas(store.records()) if v.ended is None]


def saga_views(store: LogStore, saga_ids: list[str]) -> list[SagaView]:
    """The views of the sagas ``saga_ids`` the log holds (unknown ids are left out), each as
    the full history shows it, read in time proportional to those sagas where the store
    allows."""
    index = _index_of(store)
    if index is not None:
        try:
            found = with_rebuild(index, lambda: [saga_view(index, sid) for sid in saga_ids])
            return [view for view in found if view is not None]
        except _FALLBACK:
            pass
    elif isinstance(store, SagaQueries):
        wanted = set(saga_ids)
        views: list[SagaView] = []
        for saga_id in saga_ids:
            views.extend(v for v in sagas(store.saga_records(saga_id)) if v.id in wanted)
        return views
    wanted = set(saga_ids)
    return [v for v in sagas(store.records()) if v.id in wanted]
