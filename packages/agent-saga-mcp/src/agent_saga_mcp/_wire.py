"""JSON-RPC messages as MCP's stdio transport frames them: one JSON object per line.

Shared by the gateway's relay to its client (:mod:`agent_saga_mcp._relay`) and its links to
stdio upstreams (:mod:`agent_saga_mcp._link`). Only framing and the message envelope live here:
what a message means is for those modules, which validate what they interpret with the SDK's
types (``mcp.types``).

Every line read is bounded: a line longer than the limit is dropped whole (read and discarded
up to its newline, never held in memory) and reported as :class:`Oversized`, so one huge line
costs its sender an error, not the gateway its memory.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

DEFAULT_LINE_LIMIT = 64 * 1024 * 1024
"""The longest message line accepted, in bytes (``--max-message-bytes`` changes it)."""


@dataclass(frozen=True)
class Oversized:
    """A line longer than the limit was read and dropped."""

    size: int
    """How many bytes were dropped (the newline included)."""


class LineReader:
    """Newline-delimited lines from a stream, each at most ``limit`` bytes.

    ``asyncio.StreamReader`` is created with ``limit`` as its own buffer limit, so it never
    buffers much more than one maximal line.
    """

    def __init__(self, reader: asyncio.StreamReader, limit: int) -> None:
        self.reader = reader
        self.limit = limit

    async def next(self) -> bytes | Oversized | None:
        """The next line (with its newline, unless it ends the stream), an :class:`Oversized`
        for a line that was too long, or ``None`` at the end of the stream."""
        try:
            line = await self.reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as end:
            return end.partial or None
        except asyncio.LimitOverrunError as over:
            return await self._drop(over.consumed)
        return line

    async def _drop(self, pending: int) -> Oversized | None:
        """Discard the current line: ``pending`` bytes now, then up to its newline."""
        dropped = 0
        while True:
            await self.reader.readexactly(pending)
            dropped += pending
            try:
                tail = await self.reader.readuntil(b"\n")
            except asyncio.IncompleteReadError:
                return None  # the stream ended inside the line
            except asyncio.LimitOverrunError as over:
                pending = over.consumed
                continue
            return Oversized(dropped + len(tail))


def encode(message: dict[str, Any]) -> bytes:
    """One message as a line (compact JSON, UTF-8, newline-terminated)."""
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def response(request_id: Any, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error(request_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        body["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": body}


def valid_id(value: Any) -> bool:
    """Whether ``value`` is a request id MCP allows: a string or an integer (not a bool)."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


__all__ = [
    "DEFAULT_LINE_LIMIT",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "LineReader",
    "Oversized",
    "encode",
    "error",
    "response",
    "valid_id",
]
