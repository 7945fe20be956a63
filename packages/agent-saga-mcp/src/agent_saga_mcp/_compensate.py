"""Compensations and probes declared in the configuration, as named compensators.

Each declared compensation becomes an async compensator registered under
:meth:`GatewayConfig.compensator_name` (``mcp:<gateway>/<upstream>/<tool>``), the name the
step's intent records before the effect runs. It maps its arguments from the step's arguments,
result and idempotency key, and calls the compensation tool through an
:class:`~agent_saga_mcp._upstream.UpstreamCaller`: the gateway's live sessions when the gateway
rolls back, a fresh connection per call when ``agent-saga recover`` finishes a dead gateway's
rollback (see :mod:`agent_saga_mcp.recovery`). An error result from the compensation tool is a
failed compensation (the saga then needs a human), never a silent success.

A probe is called like a compensator, with the step's arguments and its own idempotency key,
and answers the core's question "did it land?": ``False`` when the probe's ``landed`` value is
false, the probe's ``result`` value (or ``True``) when it is true, ``None`` (cannot tell: the
step is escalated) when the probe fails or its answer lacks the field.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from agent_saga import AgentSagaError, CompensatorRegistry

from ._config import CallDecl, ProbeDecl, ToolDecl
from ._mapping import MappingError
from ._results import structured, text_of
from ._upstream import UpstreamCaller


class CompensationRefused(AgentSagaError):
    """The upstream answered a compensation call with an error result."""


def compensator_for(
    decl: ToolDecl, call: CallDecl, upstreams: UpstreamCaller
) -> Callable[..., Awaitable[None]]:
    """The compensator of ``decl``'s tool: calls ``call.tool`` on the same upstream."""

    async def compensate(**given: Any) -> None:
        result = given.pop("result", None)
        key = given.pop("idempotency_key", None)
        arguments = call.arguments.build(given, result, key)
        answer = await upstreams.call(decl.upstream, call.tool, arguments)
        if answer.is_error:
            raise CompensationRefused(f"{call.tool} answered with an error: {text_of(answer)}")

    compensate.__doc__ = f"Undo {decl.upstream}/{decl.tool} by calling {call.tool}."
    return compensate


def probe_for(
    decl: ToolDecl, probe: ProbeDecl, upstreams: UpstreamCaller
) -> Callable[..., Awaitable[Any]]:
    """The probe of ``decl``'s tool (see the module docstring for its answers)."""

    async def probe_call(**given: Any) -> Any:
        given.pop("result", None)
        key = given.pop("idempotency_key", None)
        try:
            arguments = probe.arguments.build(given, None, key)
            answer = await upstreams.call(decl.upstream, probe.tool, arguments)
        except Exception:
            return None
        if answer.is_error:
            return None
        value = structured(answer)
        try:
            landed = probe.landed.resolve({}, value, None)
        except MappingError:
            return None
        if not landed:
            return False
        if probe.result is None:
            return True
        try:
            return probe.result.resolve({}, value, None)
        except MappingError:
            return True

    probe_call.__doc__ = f"Did a call of {decl.upstream}/{decl.tool} land? Asks {probe.tool}."
    return probe_call


def register_compensators(
    declarations: list[ToolDecl],
    names: Callable[[ToolDecl], str],
    upstreams: UpstreamCaller,
    registry: CompensatorRegistry,
) -> dict[str, str]:
    """Register a compensator for every declaration with a compensation.

    Returns each exposed tool's compensator name.
    """
    registered: dict[str, str] = {}
    for decl in declarations:
        if decl.compensate is None:
            continue
        name = names(decl)
        registry.register(name, compensator_for(decl, decl.compensate, upstreams))
        registered[decl.exposed] = name
    return registered


__all__ = ["CompensationRefused", "compensator_for", "probe_for", "register_compensators"]
