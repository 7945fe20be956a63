"""Running a LangChain runnable or agent loop inside a transaction, with the saga id on its runs."""

from __future__ import annotations

from typing import Any

from agent_saga import AgentKit, saga_scope
from langchain_core.runnables import Runnable, RunnableConfig, ensure_config

SAGA_ID_KEY = "saga_id"
"""The run-metadata key that carries the saga id (also a ``saga:<id>`` tag)."""
THREAD_SAGA_KEY = "agent_saga_id"
"""The ``configurable`` key of a LangGraph thread's config that carries its saga id; a
checkpointer saves it in each checkpoint's metadata, so a later request finds it by thread."""


def saga_config(saga_id: str, config: RunnableConfig | None = None) -> RunnableConfig:
    """``config`` with the saga id added to its metadata and tags (callbacks and tracers see it).

    The given config is not modified.
    """
    merged = ensure_config(config)
    merged["metadata"] = {**(merged.get("metadata") or {}), SAGA_ID_KEY: saga_id}
    tag = f"saga:{saga_id}"
    tags = list(merged.get("tags") or [])
    merged["tags"] = tags if tag in tags else [*tags, tag]
    return merged


def invoke_in_saga(
    runnable: Runnable[Any, Any],
    input: Any,
    config: RunnableConfig | None = None,
    *,
    name: str | None = None,
    kit: AgentKit | None = None,
) -> Any:
    """Run ``runnable.invoke`` inside a new transaction (of ``kit``, else the default kit).

    The saga commits when the runnable returns, and rolls back (raising
    :class:`agent_saga.SagaRolledBack`) when it raises or when a wrapped tool failed along the
    way, even if the loop turned that failure into a message and finished.
    """
    transaction = kit.transaction(name) if kit is not None else saga_scope(name)
    with transaction as saga:
        return runnable.invoke(input, saga_config(saga.id, config))


async def ainvoke_in_saga(
    runnable: Runnable[Any, Any],
    input: Any,
    config: RunnableConfig | None = None,
    *,
    name: str | None = None,
    kit: AgentKit | None = None,
) -> Any:
    """:func:`invoke_in_saga` with ``runnable.ainvoke``."""
    transaction = kit.transaction(name) if kit is not None else saga_scope(name)
    async with transaction as saga:
        return await runnable.ainvoke(input, saga_config(saga.id, config))


def thread_config(saga_id: str, config: RunnableConfig | None = None) -> RunnableConfig:
    """A LangGraph thread's ``config`` carrying the saga id (see :func:`saga_config`), also in
    ``config["configurable"]["agent_saga_id"]``, which the graph's checkpointer saves in the
    metadata of every checkpoint of the thread (a copy; ``config`` is not modified)."""
    merged = saga_config(saga_id, config)
    merged["configurable"] = {**(merged.get("configurable") or {}), THREAD_SAGA_KEY: saga_id}
    return merged


def saga_of_thread(graph: Any, config: RunnableConfig) -> str | None:
    """The saga id saved with the latest checkpoint of ``config``'s thread (``None``: none).

    ``graph`` is a compiled LangGraph graph with a checkpointer (``graph.get_state``). Use it to
    resume a suspended saga in a later request: ``kit.transaction(resume=saga_of_thread(...))``.
    """
    snapshot = graph.get_state(config)
    value = (getattr(snapshot, "metadata", None) or {}).get(THREAD_SAGA_KEY)
    return value if isinstance(value, str) else None
