"""The gateway's connection to an upstream MCP server it starts as a command (stdio), held at the
message level.

The gateway is that server's only client. It sends JSON-RPC lines with ids of its own (one
counter per upstream, so requests relayed for several clients or tools never collide), matches
the answers by id, and keeps each ``tools/call`` result's JSON as the upstream sent it, so the
relay can forward it unchanged (:class:`RelayedResult`). The handshake follows the MCP
lifecycle: ``initialize`` (at the newest handshake-era version), then
``notifications/initialized``. What it interprets is validated with the SDK's types:
the initialize result, each ``tools/list`` page, each ``tools/call`` result.

Requests from the upstream are answered: ``ping`` with an empty result, anything else (sampling,
elicitation, roots) with "method not found", as the SDK's client does when it has no callback
for them. Its notifications (logs, progress) are dropped.

The upstream's output is read from a pipe of the link's own
(:class:`~agent_saga_mcp._upstream_output.OutputLines`): each line is handled as it arrives,
in the read callback itself, so an answer wakes its caller with no reading task and no
hand-over through the subprocess transport in between.

When the process exits or closes its output, every request in flight fails with
:class:`UpstreamError` at once, and so does every later one: the link is not reopened.
A request whose caller is cancelled is cancelled upstream with ``notifications/cancelled``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent_saga import AgentSagaError
from mcp import types
from mcp.client.stdio import get_default_environment
from mcp.shared.exceptions import MCPError
from mcp.types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION
from pydantic import ValidationError

from . import _wire
from ._upstream_output import OutputLines
from ._version import __version__

CLIENT_INFO = {"name": "agent-saga-mcp", "version": __version__}
_GRACE = 2.0
"""Seconds an upstream gets to exit after its stdin closes, then after SIGTERM."""
_MAX_PAGES = 1000
_EXIT_POLLS = 50


class UpstreamError(AgentSagaError):
    """An upstream server could not be started, reached or listed, or went away."""


class RelayedResult(types.CallToolResult):
    """A ``tools/call`` result, validated, with the JSON the upstream sent (:attr:`raw`) and
    the protocol version it was sent at (:attr:`version`).

    Both are kept in slots, not pydantic private attributes (which cost a tenth of the
    validation again): they are not fields, so they are neither dumped, compared nor copied;
    a copy of a relayed result is an ordinary result (:attr:`version` ``""``)."""

    __slots__ = ("relayed_raw", "relayed_version")

    @classmethod
    def of(cls, raw: dict[str, Any], version: str) -> RelayedResult:
        """``raw`` validated as a ``CallToolResult``, kept with the ``version`` it came at.

        A result whose blocks all say they are text is validated in one pass by
        :class:`_RelayedText` (its content typed as text blocks), where the SDK's content is a
        union that pydantic tries member by member on each block. The outcome is the same
        model: a text block validates as ``TextContent`` in the union or alone. One that fails
        there is validated again as the SDK's result, so it is refused with the error it
        always gave.

        Raises:
            pydantic.ValidationError: ``raw`` is not a ``CallToolResult``.
        """
        result: RelayedResult | None = None
        if _all_text(raw):
            try:
                result = _validate_text_result(raw, by_name=False)
            except ValidationError:
                result = None
        if result is None:
            result = cls.model_validate(raw, by_name=False)
        object.__setattr__(result, "relayed_raw", raw)
        object.__setattr__(result, "relayed_version", version)
        return result

    @property
    def raw(self) -> dict[str, Any]:
        return getattr(self, "relayed_raw", {})

    @property
    def version(self) -> str:
        return getattr(self, "relayed_version", "")


class _RelayedText(RelayedResult):
    """A relayed result whose blocks are all text (see :meth:`RelayedResult.of`)."""

    content: list[types.TextContent]  # type: ignore[assignment]


_validate_text_result = _RelayedText.model_validate


def _all_text(raw: dict[str, Any]) -> bool:
    """Whether ``raw``'s content is a non-empty list of objects that each say they are text."""
    blocks = raw.get("content")
    if type(blocks) is not list or not blocks:
        return False
    for block in blocks:  # noqa: SIM110 (a loop: no generator per result)
        if type(block) is not dict or block.get("type") != "text":
            return False
    return True


class StdioLink:
    """One running upstream process and the requests in flight to it."""

    def __init__(self, name: str, process: asyncio.subprocess.Process, output: OutputLines) -> None:
        self.name = name
        self.process = process
        assert process.stdin is not None
        self.stdin = process.stdin
        self.stdin_pipe = process.stdin.transport
        """The upstream's stdin, written directly (what ``stdin.write`` does, one call less)."""
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.next_id = 0
        self.version = LATEST_HANDSHAKE_VERSION
        self.gone: str | None = None
        """Why the link is closed, once it is."""
        self.reading = True
        """Whether the upstream's lines are still read (not after its output ended or it
        sent a line over the limit)."""
        self.ending: asyncio.Task[None] | None = None
        """Waits briefly for the exit code once the output has ended, then fails the link."""
        self.output = output
        self.loop = asyncio.get_running_loop()
        output.attach(self._lines, self._ended)

    @classmethod
    async def start(
        cls,
        name: str,
        command: str,
        args: list[str],
        env: Mapping[str, str] | None,
        cwd: Path | None,
        limit: int = _wire.DEFAULT_LINE_LIMIT,
    ) -> StdioLink:
        """Start the upstream (its own process group, stderr shared with the gateway's) and
        complete the MCP handshake.

        Raises:
            UpstreamError: it could not be started, or its handshake failed (it is stopped).
        """
        loop = asyncio.get_running_loop()
        output_fd, child_output = os.pipe()  # both ends not inheritable; stdout= dups one in
        try:
            transport, protocol = await loop.subprocess_exec(
                lambda: asyncio.subprocess.SubprocessStreamProtocol(limit=limit, loop=loop),
                command,
                *args,
                stdin=asyncio.subprocess.PIPE,
                stdout=child_output,
                stderr=sys.stderr,
                env={**get_default_environment(), **(env or {})},
                cwd=cwd,
                start_new_session=True,
            )
        except BaseException as exc:
            os.close(output_fd)
            if isinstance(exc, OSError):
                raise UpstreamError(f"cannot start {command!r}: {exc}") from None
            raise
        finally:
            os.close(child_output)
        process = asyncio.subprocess.Process(transport, protocol, loop)
        output = OutputLines(limit)
        await loop.connect_read_pipe(lambda: output, os.fdopen(output_fd, "rb", buffering=0))
        link = cls(name, process, output)
        try:
            await link._handshake()
        except BaseException:
            await link.close()
            raise
        return link

    async def _handshake(self) -> None:
        params = {
            "protocolVersion": LATEST_HANDSHAKE_VERSION,
            "capabilities": {},
            "clientInfo": CLIENT_INFO,
        }
        try:
            result = types.InitializeResult.model_validate(
                await self.request("initialize", params), by_name=False
            )
        except ValidationError as exc:
            raise UpstreamError(f"malformed initialize result: {_first(exc)}") from None
        if result.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS:
            raise UpstreamError(f"unsupported protocol version {result.protocol_version!r}")
        self.version = result.protocol_version
        self._notify("notifications/initialized", None)

    async def list_tools(self) -> list[types.Tool]:
        """Every tool the upstream offers, across pages."""
        tools: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            raw = await self.request("tools/list", {"cursor": cursor} if cursor else None)
            try:
                page = types.ListToolsResult.model_validate(raw, by_name=False)
            except ValidationError as exc:
                raise UpstreamError(f"malformed tools/list result: {_first(exc)}") from None
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                return tools
        raise UpstreamError(f"tools/list returned more than {_MAX_PAGES} pages")

    async def call_tool(self, tool: str, arguments: Mapping[str, Any]) -> RelayedResult:
        """One ``tools/call``; its result validated, its JSON kept.

        Raises:
            MCPError: the upstream answered with an error.
            UpstreamError: the link is gone, or the result is not a ``CallToolResult``.
        """
        sent = arguments if type(arguments) is dict else dict(arguments)  # written out at once
        raw = await self.request("tools/call", {"name": tool, "arguments": sent})
        try:
            return RelayedResult.of(raw, self.version)
        except ValidationError as exc:
            raise UpstreamError(f"malformed tools/call result: {_first(exc)}") from None

    async def request(self, method: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
        """Send a request; its result as sent.

        Raises:
            MCPError: the upstream answered with an error.
            UpstreamError: the link is gone (before or while waiting).
        """
        if self.gone is not None:
            raise UpstreamError(self.gone)
        self.next_id += 1
        request_id = self.next_id
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        answer: asyncio.Future[dict[str, Any]] = self.loop.create_future()
        self.pending[request_id] = answer
        try:
            self._send(message)
            return await answer
        except asyncio.CancelledError:
            answered = answer.done() and not answer.cancelled()
            if self.gone is None and not answered:
                cancel = {"requestId": request_id, "reason": "the gateway's caller cancelled"}
                self._notify("notifications/cancelled", cancel)
            raise
        finally:
            self.pending.pop(request_id, None)

    def _notify(self, method: str, params: dict[str, Any] | None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self._send(message)

    def _send(self, message: dict[str, Any]) -> None:
        pipe = self.stdin_pipe
        if self.gone is None and not pipe.is_closing():
            pipe.write(_wire.encode(message))

    def _lines(self, lines: list[bytes | _wire.Oversized]) -> None:
        """Handle lines of the upstream's output, in order (called by its protocol)."""
        for line in lines:
            if not self.reading:
                return
            if isinstance(line, _wire.Oversized):
                self._stop_reading(f"sent a message of {line.size} bytes, over the limit")
                return
            try:
                self._receive(line)
            except _wire.NotJSONValue as exc:
                self._refuse(line, exc)
            except (ValueError, TypeError, RecursionError):
                continue  # a line that does not parse as a message: dropped

    def _ended(self, exc: BaseException | None) -> None:
        """The upstream's output is closed (called by its protocol)."""
        if self.reading:
            why = "closed its output" if exc is None else f"could not be read ({exc})"
            self._stop_reading(why)

    def _stop_reading(self, why: str) -> None:
        self.reading = False
        self.ending = asyncio.get_running_loop().create_task(self._end(why))

    async def _end(self, why: str) -> None:
        for _ in range(_EXIT_POLLS):  # an exit code, when it comes soon, says more
            if self.process.returncode is not None:
                break
            await asyncio.sleep(0.01)
        self._fail(f"upstream '{self.name}' {why}")

    def _receive(self, line: bytes) -> None:
        message = _wire.decode(line)  # not JSON: dropped by the caller; a request stays pending
        if not isinstance(message, dict):
            return
        if "method" in message:
            if _wire.valid_id(message.get("id")):  # a request to the gateway
                if message["method"] == "ping":
                    self._send(_wire.response(message["id"], {}))
                else:
                    why = "the gateway does not serve this to upstreams"
                    self._send(_wire.error(message["id"], _wire.METHOD_NOT_FOUND, why))
            return
        request_id = message.get("id")
        answer = self.pending.get(request_id) if isinstance(request_id, int) else None
        if answer is None or answer.done():
            return
        if "error" in message:
            body = message["error"] if isinstance(message["error"], dict) else {}
            code, text = body.get("code"), body.get("message")
            answer.set_exception(
                MCPError(
                    code=code if isinstance(code, int) else _wire.INTERNAL_ERROR,
                    message=str(text) if text is not None else "upstream error",
                    data=body.get("data"),
                )
            )
        elif isinstance(message.get("result"), dict):
            answer.set_result(message["result"])
        else:
            answer.set_exception(UpstreamError(f"upstream '{self.name}' sent a malformed answer"))

    def _refuse(self, line: bytes, exc: _wire.NotJSONValue) -> None:
        """An answer holding a value JSON has no place for (NaN, a lone surrogate, ...) fails
        the request it answers: the client and the log could not be given the same value."""
        message = _wire.decode_lenient(line)
        request_id = message.get("id") if isinstance(message, dict) else None
        answer = self.pending.get(request_id) if isinstance(request_id, int) else None
        if answer is not None and not answer.done():
            why = f"upstream '{self.name}' sent an answer JSON cannot carry: {exc}"
            answer.set_exception(UpstreamError(why))

    def _fail(self, why: str) -> None:
        if self.gone is not None:
            return
        code = self.process.returncode
        self.gone = why if code is None else f"{why} (exit code {code})"
        for answer in self.pending.values():
            if not answer.done():
                answer.set_exception(UpstreamError(self.gone))

    def stop(self) -> None:
        """Close the upstream's stdin: the MCP way to ask a stdio server to exit."""
        self._fail(f"upstream '{self.name}' was stopped")
        with contextlib.suppress(OSError, RuntimeError):
            self.stdin.close()

    async def close(self) -> None:
        """Stop the upstream: close its stdin, then SIGTERM and SIGKILL its process group if it
        has not exited within a grace period each. The process is reaped on return."""
        self.stop()
        for sig in (None, signal.SIGTERM, signal.SIGKILL):
            if sig is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.process.pid, sig)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.process.wait()), _GRACE)
                break
        self.reading = False
        if self.output.transport is not None:
            self.output.transport.close()
        if self.ending is not None:
            self.ending.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.ending


def _first(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"]) or "(top)"
    return f"{where}: {error['msg']}"


__all__ = ["CLIENT_INFO", "RelayedResult", "StdioLink", "UpstreamError"]
