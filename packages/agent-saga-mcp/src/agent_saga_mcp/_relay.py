"""The gateway's stdio client session, served at the message level.

The client's JSON-RPC lines are read and answered here, with no SDK session in between: the
SDK's server and client sessions (typed message models, memory streams and a task hop per
message on each side) cost a bare proxy about as much as the upstream's own work per call.
What the relay interprets, it validates with the SDK's types (``mcp.types``), except the
common ``tools/call`` (a name and object arguments, nothing else), whose shape is checked by
hand: the SDK's types accept every such message as it is.

* ``initialize``: answered as the SDK's server answers it (same capabilities, server info and
  instructions, from :meth:`Gateway.server`), at the client's handshake-era version or the
  newest one; ``ping``: an empty result;
* ``tools/list``: the exposed tools (merged, prefixed, hidden ones left out), dumped once per
  protocol version through the SDK's per-version result surface;
* ``tools/call``: each in a task of its own, through :meth:`Gateway.call` (gate, log,
  compensation, refusals as ``isError`` results, the saga tools). An upstream's result goes back
  as the JSON it sent when nothing was added to it and it was sent at the client's version;
  anything else is dumped and shaped for the client's version;
* ``notifications/cancelled``: the call is cancelled (the upstream is told, the step is recorded
  failed and its saga rolled back) and, as the protocol asks, not answered;
* answers to the gateway's own requests (``elicitation/create``, for approvals).

Errors are JSON-RPC errors, never a crash: a line that is not JSON gets a parse error (id
``null``; so does NaN, Infinity or a lone surrogate, which JSON has no place for), a line over
the limit an invalid-request error (it is dropped unread), a request id already in use by a call
in progress an invalid-request error, as is a call beyond :data:`CALLS_LIMIT` calls in progress,
an unknown method "method not found". Every other request is answered "method not found", as
by the SDK's server for methods the gateway does not serve.

Where the line is drawn: a client whose first request carries the 2026 per-request envelope
(the stateless era, ``server/discover``) is handed to the SDK's server with the lines read so
far (:class:`Handoff`); the relay speaks the handshake era only.

The session ends at the end of the client's input: calls in progress finish and are answered,
questions to the client fail (the approval falls back to the other approvers), then the caller
ends the session's sagas.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from mcp import types
from mcp.types import PROTOCOL_VERSION_META_KEY, methods
from mcp.types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION
from pydantic import ValidationError

from . import _wire
from ._gateway import STDIO, Gateway
from ._link import RelayedResult
from ._pipes import ClientLines, Line

_LEAD_LIMIT = 8
CALLS_LIMIT = 64
"""Calls in progress beyond which a ``tools/call`` is refused: each holds its arguments (up to
the line limit) until it runs, and a session's calls run one at a time. (Not reading the input
instead would also hold back the answers to the gateway's own questions, which calls wait for.)
"""


class Handoff(Exception):
    """The client opened the 2026 (stateless) era: hand it to the SDK's server."""

    def __init__(self, lines: list[bytes]) -> None:
        super().__init__("the client speaks the 2026 protocol era")
        self.lines = lines


class ClientGone(Exception):
    """The client's input ended before it answered the gateway's request."""


class Relay:
    """One stdio client session of ``gateway`` (see the module docstring)."""

    def __init__(self, gateway: Gateway, lines: ClientLines, writer: asyncio.StreamWriter) -> None:
        self.gateway = gateway
        self.lines = lines
        self.writer = writer
        self.transport = writer.transport
        """The client's pipe, written directly (what ``writer.write`` would do, one call less)."""
        self.high_water = self.transport.get_write_buffer_limits()[1]
        self.caller = RelayCaller(self)
        self.loop: asyncio.AbstractEventLoop | None = None
        """The event loop :meth:`run` serves on (asked once: each ask is a ``getpid``)."""
        self.options = gateway.server().create_initialization_options()
        self.version: str | None = None
        """The protocol version agreed at ``initialize`` (``None`` before)."""
        self.capabilities: types.ClientCapabilities | None = None
        self.calls: dict[Any, asyncio.Task[None]] = {}
        """Calls in progress, by the client's request id."""
        self.asked: dict[int, asyncio.Future[dict[str, Any]]] = {}
        """The gateway's requests to the client, by their id."""
        self.asked_count = 0
        self.tool_lists: dict[str, dict[str, Any]] = {}
        self.lead: list[bytes] | None = []
        """Lines read before the client's first request (``None`` once it came)."""
        self.open = True
        self.done: asyncio.Future[None] | None = None
        """Set when the client's input ends (or fails with what ended the reading)."""
        self.draining: asyncio.Task[None] | None = None
        """Waits for a slow client to read its answers; its input is not read meanwhile."""

    async def run(self) -> None:
        """Serve until the client's input ends; calls in progress are answered first. When
        cancelled (the gateway is stopped), the calls in progress are cancelled.

        Each line is handled as it arrives, in the event loop's callback (:meth:`line`).

        Raises:
            Handoff: the client speaks the 2026 era; no line of it was answered (the lines
                after it stay queued in :attr:`lines`).
        """
        ended = False
        self.loop = asyncio.get_running_loop()
        self.done = self.loop.create_future()
        self.lines.attach(self.line)
        try:
            await self.done
            ended = True
        finally:
            self.lines.attach(None)
            if self.draining is not None:
                self.draining.cancel()
            self.open = False
            for question in self.asked.values():
                if not question.done():
                    question.set_exception(ClientGone("the client closed the session"))
            calls = list(self.calls.values())
            if not ended:  # stopped (a signal): the calls in progress are cancelled
                for task in calls:
                    task.cancel()
            if calls:
                await asyncio.wait(calls)

    def line(self, line: Line) -> None:
        """Handle one line of the client's input (``None``: the end of it)."""
        done = self.done
        assert done is not None
        if done.done():
            return
        try:
            if line is None:
                done.set_result(None)
                return
            if isinstance(line, _wire.Oversized):
                why = f"a message of {line.size} bytes is over the limit of "
                why += f"{self.lines.limit} bytes: dropped unread"
                self.send(_wire.error(None, _wire.INVALID_REQUEST, why))
            else:
                self.receive(line)
        except Exception as exc:  # a handoff (or a fault): run() raises it; no more lines
            self.lines.sink = None
            done.set_exception(exc)
            return
        transport = self.transport
        if (
            self.draining is None
            and transport.get_write_buffer_size() > self.high_water
            and not transport.is_closing()
        ):  # the client is slow to read: read no more of its input until it has caught up
            self.lines.pause("drain")
            self.draining = asyncio.get_running_loop().create_task(self._caught_up())

    async def _caught_up(self) -> None:
        try:
            await self.drain()
        finally:
            self.draining = None
            self.lines.resume("drain")

    async def drain(self) -> None:
        """Wait while the client is slow to read (a client that closed its end is not)."""
        if not self.writer.is_closing():
            with contextlib.suppress(ConnectionError):
                await self.writer.drain()

    def send(self, message: dict[str, Any]) -> None:
        transport = self.transport
        if not transport.is_closing():
            transport.write(_wire.encode(message))

    def receive(self, line: bytes) -> None:
        """Interpret one line of the client's (see the module docstring)."""
        try:
            message = _wire.decode(line)
        except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep
            self.send(_wire.error(None, _wire.PARSE_ERROR, f"Parse error: {exc}"))
            return
        if not isinstance(message, dict):
            why = "Invalid request: a message is one JSON object (MCP has no batches)"
            self.send(_wire.error(None, _wire.INVALID_REQUEST, why))
            return
        request_id, method = message.get("id"), message.get("method")
        if "id" in message and not _wire.valid_id(request_id):
            why = "Invalid request: an id is a string or an integer"
            self.send(_wire.error(None, _wire.INVALID_REQUEST, why))
            return
        params = message.get("params")
        if message.get("jsonrpc") != "2.0" or not isinstance(params, dict | None):
            why = "Invalid request: not a JSON-RPC 2.0 message with object params"
            self.send(_wire.error(request_id, _wire.INVALID_REQUEST, why))
            return
        if method is None:
            self.answered(message)
        elif not isinstance(method, str):
            self.send(_wire.error(request_id, _wire.INVALID_REQUEST, "Invalid request: method"))
        elif "id" not in message:
            self.notified(method, params)
            if self.lead is not None and len(self.lead) < _LEAD_LIMIT:
                self.lead.append(line)
        else:
            if self.lead is not None:
                lead, self.lead = self.lead, None
                if method != "initialize" and _modern(params):
                    raise Handoff([*lead, line])
            self.requested(request_id, method, params)

    def requested(self, request_id: Any, method: str, params: dict[str, Any] | None) -> None:
        if method == "initialize":
            self.initialize(request_id, params)
        elif method == "ping":
            self.send(_wire.response(request_id, {}))
        elif method not in ("tools/list", "tools/call"):
            self.send(_wire.error(request_id, _wire.METHOD_NOT_FOUND, "Method not found", method))
        elif self.version is None:
            why = "Invalid request: the session is not initialized (send initialize first)"
            self.send(_wire.error(request_id, _wire.INVALID_REQUEST, why))
        elif method == "tools/list":
            self.send(_wire.response(request_id, self.tool_list(self.version)))
        elif request_id in self.calls:
            why = f"Invalid request: id {request_id!r} is in use by a call in progress"
            self.send(_wire.error(request_id, _wire.INVALID_REQUEST, why))
        elif len(self.calls) >= CALLS_LIMIT:
            why = f"Too many calls in progress ({CALLS_LIMIT}): wait for an answer first"
            self.send(_wire.error(request_id, _wire.INVALID_REQUEST, why))
        else:
            call = _plain_call(params)
            if call is None:
                try:
                    valid = types.CallToolRequestParams.model_validate(params or {}, by_name=False)
                except ValidationError as exc:
                    self.send(_wire.error(request_id, _wire.INVALID_PARAMS, _invalid(exc)))
                    return
                call = valid.name, valid.arguments
            assert self.loop is not None
            task = self.loop.create_task(self.call(request_id, *call))
            self.calls[request_id] = task

    def initialize(self, request_id: Any, params: dict[str, Any] | None) -> None:
        try:
            init = types.InitializeRequestParams.model_validate(params or {}, by_name=False)
        except ValidationError as exc:
            self.send(_wire.error(request_id, _wire.INVALID_PARAMS, _invalid(exc)))
            return
        asked = init.protocol_version
        version = asked if asked in HANDSHAKE_PROTOCOL_VERSIONS else LATEST_HANDSHAKE_VERSION
        options = self.options
        result = types.InitializeResult(
            protocol_version=version,
            capabilities=options.capabilities,
            server_info=types.Implementation(
                name=options.server_name, version=options.server_version
            ),
            instructions=options.instructions,
        )
        self.version, self.capabilities = version, init.capabilities
        self.send(_wire.response(request_id, _shaped("initialize", version, result)))

    def tool_list(self, version: str) -> dict[str, Any]:
        listed = self.tool_lists.get(version)
        if listed is None:
            result = types.ListToolsResult(tools=self.gateway.tools)
            listed = self.tool_lists[version] = _shaped("tools/list", version, result)
        return listed

    async def call(self, request_id: Any, name: str, arguments: dict[str, Any] | None) -> None:
        """Serve one ``tools/call``; cancelled (unanswered) by ``notifications/cancelled``."""
        task = asyncio.current_task(self.loop)
        try:
            result = await self.gateway.call(self.caller, name, arguments)
            assert self.version is not None
            if isinstance(result, RelayedResult) and result.version == self.version:
                answer = _wire.response(request_id, result.raw)
            else:
                answer = _wire.response(request_id, _shaped("tools/call", self.version, result))
        except Exception as exc:  # a gateway fault: the call's saga was ended by the gateway
            answer = _wire.error(request_id, _wire.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
        finally:
            if self.calls.get(request_id) is task:
                del self.calls[request_id]
        self.send(answer)
        if self.transport.get_write_buffer_size():  # else drain() would return at once
            await self.drain()

    def notified(self, method: str, params: dict[str, Any] | None) -> None:
        if method != "notifications/cancelled":
            return  # initialized, roots/list_changed, progress: nothing to do here
        try:
            cancel = types.CancelledNotificationParams.model_validate(params or {}, by_name=False)
        except ValidationError:
            return
        task = self.calls.pop(cancel.request_id, None)
        if task is not None:
            task.cancel(cancel.reason or "cancelled by the client")

    def answered(self, message: dict[str, Any]) -> None:
        question = self.asked.get(message.get("id"))  # type: ignore[arg-type]
        if question is None or question.done():
            return
        if isinstance(message.get("result"), dict):
            question.set_result(message["result"])
        else:
            error = message.get("error")
            text = error.get("message") if isinstance(error, dict) else None
            question.set_exception(RuntimeError(f"the client answered with an error: {text}"))

    async def ask(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Send the client a request of the gateway's own; its result.

        Raises:
            ClientGone: the client's input ended first.
            RuntimeError: the client answered with an error.
        """
        if not self.open:
            raise ClientGone("the client closed the session")
        self.asked_count += 1
        question_id = self.asked_count
        question: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.asked[question_id] = question
        try:
            self.send({"jsonrpc": "2.0", "id": question_id, "method": method, "params": params})
            return await question
        finally:
            del self.asked[question_id]


class RelayCaller:
    """The stdio client, as the gateway and its elicitation channel see a caller."""

    session_key = STDIO

    def __init__(self, relay: Relay) -> None:
        self.relay = relay

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The loop the relay serves on (``None`` before it runs)."""
        return self.relay.loop

    def can_elicit(self) -> bool:
        capabilities = self.relay.capabilities
        elicitation = capabilities.elicitation if capabilities is not None else None
        if elicitation is None or not self.relay.open:
            return False
        return elicitation.form is not None or elicitation.url is None

    async def elicit(self, message: str, schema: dict[str, Any]) -> types.ElicitResult:
        params = types.ElicitRequestFormParams(message=message, requested_schema=schema)
        dumped = params.model_dump(by_alias=True, mode="json", exclude_none=True)
        answer = await self.relay.ask("elicitation/create", dumped)
        return types.ElicitResult.model_validate(answer, by_name=False)


def _shaped(method: str, version: str, result: Any) -> dict[str, Any]:
    """``result`` dumped and shaped for ``version`` by the SDK's per-version result surface."""
    dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    return methods.serialize_server_result(method, version, dumped)


def _plain_call(params: dict[str, Any] | None) -> tuple[str, dict[str, Any] | None] | None:
    """Name and arguments of the common ``tools/call`` (a name, object arguments, nothing
    else), read without a model: the SDK's types accept every such message as it is. ``None``
    for any other shape, which the caller validates in full."""
    if params is None or len(params) > 2 or not isinstance(name := params.get("name"), str):
        return None
    arguments = params.get("arguments")
    if len(params) == 2 and not isinstance(arguments, dict):
        return None  # the second key is not arguments, or they are not an object
    return name, arguments


def _modern(params: dict[str, Any] | None) -> bool:
    meta = params.get("_meta") if params else None
    return isinstance(meta, dict) and PROTOCOL_VERSION_META_KEY in meta


def _invalid(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"]) or "params"
    return f"Invalid params: {where}: {error['msg']}"


__all__ = ["ClientGone", "Handoff", "Relay", "RelayCaller"]
