"""Running an Agent inside a transaction, with the saga id on the run's trace."""

from __future__ import annotations

import dataclasses
from typing import Any

from agent_saga import AgentKit, Saga, saga_scope
from agents import Agent, RunConfig, Runner, RunResult, RunState

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


SAVED_SAGA_KEY = "agent_saga_id"
SAVED_STATE_KEY = "run_state"


def suspend_run(
    result: RunResult, saga: Saga, *, expires_after: float | None = None
) -> dict[str, Any]:
    """Suspend ``saga`` (see :meth:`agent_saga.Saga.suspend`) and return what to persist: the
    run's state (``result.to_state().to_json()``) with the saga id, as JSON-ready data.

    Call it inside the transaction, after a run that stopped for approvals; leaving the block
    then writes ``saga.suspended`` instead of committing. :func:`resume_run` reads it back.
    """
    saga.suspend(expires_after=expires_after)
    return {SAVED_SAGA_KEY: saga.id, SAVED_STATE_KEY: result.to_state().to_json()}


async def resume_run(agent: Agent[Any], saved: dict[str, Any]) -> tuple[str, RunState[Any, Any]]:
    """The saga id and the run state saved by :func:`suspend_run` (in this or another
    process): approve or reject its interruptions, then run it again inside
    ``kit.transaction(resume=saga_id)``."""
    saga_id = saved.get(SAVED_SAGA_KEY)
    if not isinstance(saga_id, str):
        raise ValueError(f"no {SAVED_SAGA_KEY!r} in the saved run (not made by suspend_run)")
    return saga_id, await RunState.from_json(agent, saved[SAVED_STATE_KEY])
