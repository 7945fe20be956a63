"""The gateway's own tools, with which a model brackets its work: ``saga_begin``,
``saga_commit``, ``saga_rollback`` and ``saga_status``.

They are not saga steps. Their results are plain text for the model plus the same facts as
structured content. A misuse (committing with no saga open) is an ``isError`` result, never a
protocol error. They need a client session; a request that has none (stateless HTTP) is told so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent_saga import HaltedError
from mcp import types

from ._results import message
from ._session import SessionSagas

_NO_ARGS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}

SAGA_TOOLS: list[types.Tool] = [
    types.Tool(
        name="saga_begin",
        description=(
            "Start a transaction (saga) for the tool calls that follow. If any of them fails, "
            "every call made since saga_begin is undone, newest first. Ends the session's "
            "implicit transaction first (it commits). Call saga_commit when the work is done."
        ),
        input_schema={
            "type": "object",
            "properties": {"name": {"type": "string", "description": "What this work is"}},
            "additionalProperties": False,
        },
    ),
    types.Tool(
        name="saga_commit",
        description="Commit the open transaction: the calls made in it stand.",
        input_schema=_NO_ARGS,
    ),
    types.Tool(
        name="saga_rollback",
        description=(
            "Undo every call of the open transaction, newest first (each through its declared "
            "compensation), and end it."
        ),
        input_schema={
            "type": "object",
            "properties": {"reason": {"type": "string", "description": "Why it is undone"}},
            "additionalProperties": False,
        },
    ),
    types.Tool(
        name="saga_status",
        description="The open transaction (its id, the calls made in it) and the last one ended.",
        input_schema=_NO_ARGS,
    ),
]
NAMES = frozenset(tool.name for tool in SAGA_TOOLS)


class RollbackRequested(Exception):
    """The model asked for the rollback (``saga_rollback``)."""


async def handle(
    name: str, arguments: Mapping[str, Any], sagas: SessionSagas | None
) -> types.CallToolResult:
    """Run one of the saga tools for a session (``None``: the request has no session)."""
    if sagas is None:
        return message(
            f"{name} needs a client session (this request has none, e.g. stateless HTTP); "
            "each call here is its own transaction",
            error=True,
        )
    async with sagas.lock:
        if name == "saga_begin":
            return await _begin(sagas, arguments.get("name"))
        if name == "saga_commit":
            return await _end(sagas, None)
        if name == "saga_rollback":
            reason = str(arguments.get("reason") or "requested by the model")
            return await _end(sagas, RollbackRequested(reason))
        return _status(sagas)


async def _begin(sagas: SessionSagas, name: object) -> types.CallToolResult:
    if name is not None and not isinstance(name, str):
        return message("saga_begin: 'name' must be a string", error=True)
    try:
        slot, ended = await sagas.begin(name)
    except ValueError as exc:
        return message(f"saga_begin: {exc}", error=True)
    except HaltedError as exc:
        return message(f"saga_begin refused: {exc}", error=True)
    text = f"Saga {slot.saga.id} ({slot.saga.name}) is open."
    if ended is not None:
        text += f" The session's earlier saga {ended['saga']} ended: {ended['status']}."
    return message(text, error=False, data={"saga": slot.saga.id, "ended": ended})


async def _end(sagas: SessionSagas, cause: RollbackRequested | None) -> types.CallToolResult:
    verb = "saga_commit" if cause is None else "saga_rollback"
    if sagas.slot is None:
        return message(f"{verb}: no saga is open", error=True, data={"last": sagas.last})
    summary = await sagas.end_saga(cause)
    assert summary is not None
    text = f"Saga {summary['saga']} {summary['status']}"
    if "compensated" in summary:
        text += f"; compensated steps {summary['compensated'] or 'none'}"
        if summary.get("failed"):
            text += f"; compensation FAILED for steps {summary['failed']} (needs a human)"
    failed = cause is None and summary["status"] != "committed"
    return message(text + ".", error=failed, data=summary)


def _status(sagas: SessionSagas) -> types.CallToolResult:
    slot = sagas.slot
    data = {"open": slot.describe() if slot is not None else None, "last": sagas.last}
    if slot is None:
        text = "No saga is open; the next call opens the session's saga."
    else:
        text = f"Saga {slot.saga.id} ({slot.saga.name}) is open with {len(slot.steps)} step(s)."
    return message(text, error=False, data=data)


__all__ = ["NAMES", "SAGA_TOOLS", "RollbackRequested", "handle"]
