"""Running a LlamaIndex agent workflow inside a transaction."""

from __future__ import annotations

from typing import Any

from agent_saga import AgentKit, saga_scope
from llama_index.core.agent.workflow import BaseWorkflowAgent


async def run_agent(
    agent: BaseWorkflowAgent,
    *,
    name: str | None = None,
    kit: AgentKit | None = None,
    **run_kwargs: Any,
) -> Any:
    """``await agent.run(**run_kwargs)`` inside a new transaction (of ``kit``, else the default).

    The saga commits when the run finishes, and rolls back (raising
    :class:`agent_saga.SagaRolledBack`) when it raises or when a wrapped tool failed along the
    way, even though the agent turned the failure into an error output and finished. To answer
    a tool that waits for a human, start the run yourself inside ``async with kit.transaction():``
    and stream its events.
    """
    transaction = kit.transaction(name) if kit is not None else saga_scope(name)
    async with transaction:
        return await agent.run(**run_kwargs)
