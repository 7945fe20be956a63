"""The saga id in LangSmith run metadata and tags, for every run inside a transaction.

:class:`LangSmithLink` is an :class:`agent_saga.Observer`: while a saga runs, LangSmith's
tracing context carries ``metadata["saga_id"]`` and the tag ``saga:<id>``, on top of whatever
context was there. LangSmith's ``@traceable`` runs and LangChain's LangSmith tracer take both;
every LangChain callback handler sees the tag. Needs ``langsmith`` (the ``langsmith`` extra);
nothing is sent anywhere by this module.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from agent_saga import Observer, Saga
from langsmith.run_helpers import get_tracing_context, tracing_context

from ._names import RUN_METADATA_KEY, saga_tag


class LangSmithLink(Observer):
    """Puts the saga id into LangSmith's tracing context for the length of each saga."""

    def __init__(self) -> None:
        self._open: dict[str, AbstractContextManager[None]] = {}

    def saga_begin(self, saga: Saga) -> None:
        current: dict[str, Any] = dict(get_tracing_context())
        tags = list(current.get("tags") or [])
        current["tags"] = [*tags, saga_tag(saga.id)]
        current["metadata"] = {**(current.get("metadata") or {}), RUN_METADATA_KEY: saga.id}
        scope = tracing_context(**current)
        scope.__enter__()
        self._open[saga.id] = scope

    def saga_end(self, saga: Saga, error: BaseException | None) -> None:
        scope = self._open.pop(saga.id, None)
        if scope is not None:
            scope.__exit__(None, None, None)
