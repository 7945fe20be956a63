"""The gateway: MCP ``tools/list`` and ``tools/call`` in front of the upstreams, each call a
saga step through the core's adapter seam, :class:`agent_saga.ToolCallGuard`.

This module only translates. A call's name leads to its route (hidden tools have none, so they
are unknown by name too); the route's guard gates it and logs its intent (durably unless
REVERSIBLE) in the session's saga, the upstream is called as the effect, and the outcome is
logged. What the core decides reaches the client as tool results:

* a gate refusal: an ``isError`` result with the rule and its reason (the model may correct the
  call), never a protocol error;
* an upstream error result, or a call that fails: the step is recorded failed and the saga is
  rolled back at once (:mod:`agent_saga_mcp._session`); the client gets the upstream's result
  (or the failure) with a note of what was compensated;
* success: the upstream's result, unchanged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping
from typing import Any

from agent_saga import (
    AgentKit,
    CompensatorRegistry,
    HaltedError,
    RefusedCall,
    RollbackReport,
    Semantics,
    StepRef,
    ToolCallGuard,
    ToolFailed,
)
from mcp import types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server

from . import _saga_tools, _wire
from ._catalog import Route
from ._compensate import probe_for, register_compensators
from ._config import GatewayConfig
from ._elicit import CURRENT_CALL, STDIO, CallContext, Caller, SdkCaller
from ._results import message, report_data, rollback_note, structured, text_of, with_note
from ._session import SagaSlot, SessionSagas, StepNote
from ._upstream import UpstreamCaller
from ._version import __version__


class StepFailed(Exception):
    """The upstream call raised (transport error, protocol error, cancellation)."""


def guards_for(
    config: GatewayConfig,
    routes: Mapping[str, Route],
    upstreams: UpstreamCaller,
    registry: CompensatorRegistry,
) -> dict[str, ToolCallGuard]:
    """One guard per exposed tool; compensators and probes registered in ``registry``.

    A declaration's ``redact`` paths are masked by the guard before anything is logged.
    """
    names = register_compensators(
        config.declarations(),
        lambda d: config.compensator_name(d.upstream, d.tool),
        upstreams,
        registry,
    )
    guards: dict[str, ToolCallGuard] = {}
    for name, route in routes.items():
        decl = route.decl
        probe = probe_for(decl, decl.probe, upstreams) if decl and decl.probe else None
        guards[name] = ToolCallGuard(
            name,
            semantics=decl.semantics if decl is not None else None,
            compensate=names.get(name),
            probe=probe,
            parameters=route.parameters,
            registry=registry,
            redact=decl.redact if decl is not None else (),
        )
    return guards


class Gateway:
    """Serves the exposed tools of ``routes`` to MCP clients, one saga per client session."""

    def __init__(
        self,
        config: GatewayConfig,
        kit: AgentKit,
        routes: Mapping[str, Route],
        guards: Mapping[str, ToolCallGuard],
        upstreams: UpstreamCaller,
    ) -> None:
        self.config = config
        self.kit = kit
        self.routes = dict(routes)
        self.guards = dict(guards)
        self.upstreams = upstreams
        self.sessions: dict[str, SessionSagas] = {}
        self.tools = [route.definition for route in self.routes.values()]
        if config.saga_tools:
            self.tools += _saga_tools.SAGA_TOOLS
        self.inline = {
            name
            for name, guard in self.guards.items()
            if guard.semantics is Semantics.REVERSIBLE and not _may_ask(self.routes[name])
        }
        """Tools whose gate runs on the event loop: REVERSIBLE (no fsync before the call) and
        no rule that could ask a human (so their calls set no :data:`CURRENT_CALL` for the
        elicitation channel). The others are gated in a worker thread, so an fsync or an
        approval wait never holds up other sessions."""

    def server(self) -> Server[Any]:
        """The low-level MCP server answering ``tools/list`` and ``tools/call``.

        The SDK's OpenTelemetry middleware is left out: it costs a fraction of a millisecond
        per request even with no exporter, and agent-saga's observers (agent-saga-otel) trace
        the gateway's sagas and steps.
        """
        server: Server[Any] = Server(
            self.config.name,
            version=__version__,
            instructions=(
                "Tool calls through this server run as transactions: when one fails, the "
                "earlier calls of the transaction are undone. Use saga_begin / saga_commit to "
                "bracket a unit of work."
                if self.config.saga_tools
                else None
            ),
            on_list_tools=self.list_tools,
            on_call_tool=self._sdk_call_tool,
        )
        server.middleware = []
        return server

    async def list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self.tools)

    def session_for(self, caller: Caller) -> SessionSagas | None:
        """The sagas of the caller's client session; ``None`` when it has none (stateless)."""
        key = caller.session_key
        if key is None:
            return None
        sagas = self.sessions.get(key)
        if sagas is None or sagas.closed:
            sagas = self.sessions[key] = SessionSagas(self.kit, self.config.saga_name)
        return sagas

    async def end_session(
        self, key: str, *, clean: bool, why: str = "the gateway stopped"
    ) -> dict[str, Any] | None:
        """End client session ``key`` (see :meth:`SessionSagas.end_session`); its saga's summary."""
        sagas = self.sessions.pop(key, None)
        return await sagas.end_session(clean=clean, why=why) if sagas is not None else None

    async def end_all(self, *, clean: bool) -> None:
        for key in list(self.sessions):
            await self.end_session(key, clean=clean)

    async def _sdk_call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        # The SDK's parser reads NaN and Infinity (the relay's refuses them): such a value
        # would be logged as a $repr and reach the upstream as null, so the call is refused.
        why = _wire.unrepresentable(params.arguments)
        if why is not None:
            return message(f"Invalid arguments for {params.name}: {why}", error=True)
        return await self.call_tool(SdkCaller(ctx), params)

    async def call_tool(
        self, caller: Caller, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        """Serve one ``tools/call`` from ``caller`` (see the module docstring); never raises
        for what the core decides, only for a fault of the gateway itself or a cancellation
        (after which the call's saga has been rolled back)."""
        return await self.call(caller, params.name, params.arguments)

    async def call(
        self, caller: Caller, name: str, arguments: Mapping[str, Any] | None
    ) -> types.CallToolResult:
        """:meth:`call_tool` with the request's name and arguments already read."""
        arguments = dict(arguments or {})
        sagas = self.session_for(caller)
        if self.config.saga_tools and name in _saga_tools.NAMES:
            return await _saga_tools.handle(name, arguments, sagas)
        route = self.routes.get(name)
        if route is None:
            return message(f"Unknown tool: {name}", error=True)
        if sagas is None:  # no session: the call is a saga of its own
            return await self._call(None, caller, route, arguments)
        lock = sagas.lock  # as ``async with``, two coroutines fewer
        await lock.acquire()
        try:
            return await self._call(sagas, caller, route, arguments)
        finally:
            lock.release()

    async def _call(
        self,
        sagas: SessionSagas | None,
        caller: Caller,
        route: Route,
        arguments: dict[str, Any],
    ) -> types.CallToolResult:
        try:
            slot = sagas.current() if sagas is not None else self._own_saga()
        except HaltedError as exc:
            return message(f"Tool {route.exposed} was refused and did not run: {exc}", error=True)
        step = self._step(caller, route, arguments)
        try:
            outcome = await slot.run(step)
        except BaseException as exc:  # cancelled: recorded failed by the guard; undo now
            await self._end(sagas, slot, exc)
            raise
        if isinstance(outcome, RefusedCall):
            return await self._refused(sagas, slot, outcome)
        if isinstance(outcome, StepFailed):  # rolled back even if nothing doomed the saga
            report = await self._end(sagas, slot, outcome)
            note = rollback_note(report, f"{route.exposed} failed") if report else ""
            data = report_data(report) if report else None
            return message(
                f"{route.exposed} failed: {outcome}. {note}".strip(), error=True, data=data
            )
        ordinal, result = outcome
        if result.is_error:
            report = await self._end(sagas, slot, None)
            cause = f"{route.exposed} returned an error"
            return with_note(result, rollback_note(report, cause)) if report else result
        slot.steps.append(StepNote(ordinal, route.exposed, "done"))
        if sagas is None:
            await slot.finish()
        return result

    def _own_saga(self) -> SagaSlot:
        return SagaSlot.open(self.kit, self.config.saga_name, explicit=False)

    async def _step(
        self, caller: Caller, route: Route, arguments: dict[str, Any]
    ) -> RefusedCall | StepFailed | tuple[int, types.CallToolResult]:
        """One gated call; runs in the saga's context (see :meth:`SagaSlot.run`).

        A call whose gate may ask a human (not :attr:`inline`) is told to the elicitation
        channel through :data:`CURRENT_CALL`; an inline one cannot ask, so it sets nothing.
        """
        inline = route.exposed in self.inline
        token = None
        if not inline:
            loop = getattr(caller, "loop", None) or asyncio.get_running_loop()
            token = CURRENT_CALL.set(CallContext(caller, loop))
        decl = route.decl
        ordinal = 0

        def effect(step: StepRef | None) -> Awaitable[types.CallToolResult]:
            """The upstream call, to be awaited by the core (no coroutine of its own)."""
            nonlocal ordinal
            sent = dict(arguments)
            if step is not None:
                ordinal = step.ordinal
                if decl is not None and decl.idempotency_key is not None:
                    sent[decl.idempotency_key] = step.idempotency_key
            return self.upstreams.call(route.upstream, route.tool, sent)

        guard = self.guards[route.exposed]
        try:
            if inline:
                pending = guard.begin(arguments)
            else:  # an fsync, maybe a human: wait in a worker thread, not on the event loop
                pending = await asyncio.to_thread(guard.begin, arguments)
            if pending is None or isinstance(pending, RefusedCall):
                return pending or StepFailed("no saga is open")
            value = await pending.arun(effect, result_of=structured, error_of=_error_of)
        except Exception as exc:
            return StepFailed(f"{type(exc).__name__}: {exc}")
        finally:
            if token is not None:
                CURRENT_CALL.reset(token)
        if isinstance(value, RefusedCall):
            return value
        return ordinal, value

    async def _refused(
        self, sagas: SessionSagas | None, slot: SagaSlot, refused: RefusedCall
    ) -> types.CallToolResult:
        reason = {"tool": refused.tool, "rule": refused.rule, "reason": refused.reason}
        data: dict[str, Any] = {"refused": reason}
        if not refused.halted:
            if sagas is None:
                await slot.finish()
            return message(refused.message, error=True, data=data)
        report = await self._end(sagas, slot, None)  # a halt dooms the saga: undo it now
        if report is None:
            return message(refused.message, error=True, data=data)
        data["rollback"] = report_data(report)
        note = rollback_note(report, "the kill switch is set")
        return message(f"{refused.message}. {note}", error=True, data=data)

    async def _end(
        self, sagas: SessionSagas | None, slot: SagaSlot, cause: BaseException | None
    ) -> RollbackReport | None:
        """End ``slot``'s saga now (rolled back when doomed or ``cause``); the rollback's report."""
        if sagas is None:
            return await slot.finish(cause)
        await sagas.end_saga(cause)
        return slot.report


def _may_ask(route: Route) -> bool:
    """Whether a declared rule of ``route`` may send its calls to a human."""
    return route.decl is not None and any(r.kind == "require_approval" for r in route.decl.rules)


def _error_of(result: types.CallToolResult) -> BaseException | None:
    return ToolFailed(text_of(result)) if result.is_error else None


__all__ = ["STDIO", "Gateway", "StepFailed", "guards_for"]
