"""Duplicate delivery: a committed step's call arrives a second time, with the same key.

This is what an at-least-once queue or a client retrying after a lost response does. The
second delivery goes to the tool's own function (the engine is not asked again, as it would
not be when the retry happens below it), with the arguments and idempotency key the log
recorded for the step. A tool that deduplicates on its key makes no second effect.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import TYPE_CHECKING

from agent_saga import build_history

from ._words import step_name

if TYPE_CHECKING:
    from agent_saga import AgentKit, Record


def redeliver(kit: AgentKit, records: list[Record], ordinal: int, tool: str) -> list[str]:
    """Call step ``ordinal``'s tool again; returns notes (why it could not, what it raised)."""
    name = step_name(ordinal, tool)
    views = build_history(records).sagas
    steps = [s for view in views for s in view.steps if s.ordinal == ordinal and s.tool == tool]
    specs = [spec for spec in kit.runtime.tools.specs() if spec.name == tool]
    if not steps or not specs:
        return [f"{name} did not run in this run: nothing to deliver again"]
    step, spec = steps[0], specs[0]
    if not isinstance(step.args, dict):
        return [f"{name}: its arguments were not stored by name: not delivered again"]
    kwargs = dict(step.args)
    if "idempotency_key" in spec.signature.parameters:
        kwargs["idempotency_key"] = step.idempotency_key
    try:
        outcome = spec.func(**kwargs)
        if inspect.isawaitable(outcome):
            asyncio.run(_awaited(outcome))
    except Exception as exc:
        return [f"the duplicate of {name} raised {type(exc).__name__}: {exc}"]
    return []


async def _awaited(awaitable: object) -> None:
    await awaitable  # type: ignore[misc]
