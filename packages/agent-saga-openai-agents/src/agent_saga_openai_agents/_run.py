"""Running an Agent inside a transaction, with the saga id on the run's trace."""

from __future__ import annotations

import dataclasses
from typing import Any

from agent_saga import AgentKit, saga_scope
from agents import Agent, RunConfig, Runner, RunResult

SAGA_ID_KEY = "saga_id"
"""The trace-metadata key that carries the saga id (the trace's ``group_id`` is the saga id)."""


def saga_run_config(saga_id: str, run_config: RunConfig | None = None) -> RunConfig:
    """``run_config`` with the saga id as the trace's group and in its metadata (a copy)."""
    config = run_config or RunConfig()
    metadata = {**(config.trace_metadata or {}), SAGA_ID_KEY: saga_id}
    return dataclasses.replace(config, group_id=saga_id, trace_metadata=metadata)


async def run_in_saga(
    agent: Agent[Any],
    input: Any,
    *,
    name: str | None = None,
    kit: AgentKit | None = None,
    run_config: RunConfig | None = None,
    **run_kwargs: Any,
) -> RunResult:
    """``await Runner.run(agent, input, ...)`` inside a new transaction (of ``kit``, else the
    default kit).

    The saga commits when the run returns, and rolls back (raising
    :class:`agent_saga.SagaRolledBack`) when it raises or when a wrapped tool failed along the
    way, even though the SDK gave the model the error text and the run finished. A run that
    stops for approvals commits what ran so far; to resume it in the same saga, run it yourself
    inside ``async with kit.transaction() as saga:`` with :func:`saga_run_config`.
    """
    transaction = kit.transaction(name) if kit is not None else saga_scope(name)
    async with transaction as saga:
        config = saga_run_config(saga.id, run_config)
        return await Runner.run(agent, input, run_config=config, **run_kwargs)
