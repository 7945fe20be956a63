"""Running a step ahead of confirmation, and presenting its lease, sync and async.

These are what :meth:`AgentKit.speculate`, :meth:`AgentKit.aspeculate`,
:meth:`AgentKit.redeem` and :meth:`AgentKit.aredeem` do (see :mod:`.ledger`). A framework
tool (an adapter's, with ``guard`` and ``call_ahead``/``acall_ahead``) runs ahead through its
adapter, which returns the output its confirmed call gets and the result logged; that call,
through :meth:`~agent_saga.ToolCallGuard.run`, takes it as a ``@tool`` function's call does.
"""

from __future__ import annotations

from typing import Any

from ..._errors import SpeculationError
from .lease import Lease
from .ledger import PRESENTED, Speculation, guard_of

__all__ = ["aredeem", "aspeculate", "redeem", "speculate"]


def _framework_body(
    tool: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], *, is_async: bool
) -> Any:
    """For a framework tool, its adapter's body for these arguments (checked now, before the
    step is gated or logged); ``None`` for a ``@tool`` function."""
    if guard_of(tool) is None:
        return None
    if args:
        raise SpeculationError(f"{name}: a framework tool runs ahead with named arguments only")
    return tool.acall_ahead(dict(kwargs)) if is_async else tool.call_ahead(dict(kwargs))


def speculate(
    speculation: Speculation, tool: object, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Lease:
    """Run a sync REVERSIBLE ``tool`` now as a step of the current saga; its lease.

    Raises:
        SpeculationError: the call cannot be speculated (nothing ran, nothing was logged).
        GateRefused: the gate refused the step (logged); whatever the tool raised (logged).
    """
    saga, spec, given, ttl = speculation.prepare(tool, args, kwargs, None, is_async=False)
    body = _framework_body(tool, spec.name, args, kwargs, is_async=False)
    prepared = saga._prepare(spec, args, kwargs)
    try:
        if body is not None:
            output, result = body(prepared.step.ref)
        else:
            output = result = spec.func(*prepared.call_args, **prepared.call_kwargs)
    except BaseException as exc:
        saga._failed(prepared, exc)
        raise
    saga._done(prepared, result)
    return speculation.issue(saga, spec, prepared.step, output, given, ttl)


async def aspeculate(
    speculation: Speculation, tool: object, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Lease:
    """:func:`speculate` for an async tool (awaited; a wait for approvals runs in a thread)."""
    saga, spec, given, ttl = speculation.prepare(tool, args, kwargs, None, is_async=True)
    body = _framework_body(tool, spec.name, args, kwargs, is_async=True)
    if saga.runtime.approvals is None:
        prepared = saga._prepare(spec, args, kwargs)
    else:
        import asyncio  # the running loop has loaded it already

        prepared = await asyncio.to_thread(saga._prepare, spec, args, kwargs)
    try:
        if body is not None:
            output, result = await body(prepared.step.ref)
        else:
            output = result = await spec.func(*prepared.call_args, **prepared.call_kwargs)
    except BaseException as exc:
        saga._failed(prepared, exc)
        raise
    saga._done(prepared, result)
    return speculation.issue(saga, spec, prepared.step, output, given, ttl)


def redeem(
    speculation: Speculation,
    lease: object,
    tool: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """Call the sync ``tool`` with ``lease`` presented: the speculated result when the lease
    holds for this call, else the call runs normally (and the refusal is logged)."""
    box = speculation.present(tool, lease, is_async=False)
    token = PRESENTED.set(box)
    try:
        return tool(*args, **kwargs)
    finally:
        PRESENTED.reset(token)


async def aredeem(
    speculation: Speculation,
    lease: object,
    tool: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """:func:`redeem` for an async tool."""
    box = speculation.present(tool, lease, is_async=True)
    token = PRESENTED.set(box)
    try:
        return await tool(*args, **kwargs)
    finally:
        PRESENTED.reset(token)
