"""JSON-RPC messages as MCP's stdio transport frames them: one JSON object per line.

Shared by the gateway's relay to its client (:mod:`agent_saga_mcp._relay`) and its links to
stdio upstreams (:mod:`agent_saga_mcp._link`). Only framing and the message envelope live here:
what a message means is for those modules, which validate what they interpret with the SDK's
types (``mcp.types``).

Lines are read and written with orjson, several times faster than the standard library's json on
messages this size, where it reads and writes exactly what json would (see :func:`decode` and
:func:`encode`); json handles the rest, so the wire format and the errors are json's.

Every line read is bounded: a line longer than the limit is dropped whole (read and discarded
up to its newline, never held in memory) and reported as :class:`Oversized`, so one huge line
costs its sender an error, not the gateway its memory.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from dataclasses import dataclass
from typing import Any

import orjson

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


class LineSplitter:
    """Newline-delimited lines from bytes as they arrive, each at most ``limit`` bytes: the
    lines :class:`LineReader` would read from the same bytes, for a protocol that is handed
    data (``data_received``) rather than a task that reads it.

    A line whose content (its newline left out) is longer than ``limit`` is dropped as it
    arrives, never held whole: it comes out as :class:`Oversized` with its size, newline
    included. At most ``limit`` bytes of a line in progress are held.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held: list[bytes] = []
        self.size = 0
        """Bytes of the line in progress held in :attr:`held`."""
        self.dropping: int | None = None
        """Bytes of the line in progress dropped so far, while it is being dropped."""

    def feed(self, data: bytes) -> list[bytes | Oversized]:
        """The lines ``data`` completes, in order (each with its newline)."""
        lines: list[bytes | Oversized] = []
        start, length = 0, len(data)
        while start < length:
            end = data.find(b"\n", start)
            if end < 0:
                self._hold(data[start:])
                break
            if self.dropping is not None:
                lines.append(Oversized(self.dropping + end + 1 - start))
                self.dropping = None
            elif self.size + end - start > self.limit:
                lines.append(Oversized(self.size + end + 1 - start))
                self.held, self.size = [], 0
            elif self.held:
                self.held.append(data[start : end + 1])
                lines.append(b"".join(self.held))
                self.held, self.size = [], 0
            else:
                lines.append(data[start : end + 1])
            start = end + 1
        return lines

    def _hold(self, part: bytes) -> None:
        if self.dropping is not None:
            self.dropping += len(part)
        elif self.size + len(part) > self.limit:
            self.dropping = self.size + len(part)
            self.held, self.size = [], 0
        else:
            self.held.append(part)
            self.size += len(part)

    def end(self) -> bytes | None:
        """At the end of the stream: its last line when it had no newline (``None`` when
        there is none, or when it was over the limit: dropped, as :class:`LineReader` does)."""
        tail = b"".join(self.held) if self.dropping is None else b""
        self.held, self.size, self.dropping = [], 0, None
        return tail or None


_DIGITS_AS_ZEROS = bytes(0x30 if 0x30 <= byte <= 0x39 else 0x20 for byte in range(256))
"""A ``bytes.translate`` table: every ASCII digit becomes ``0``, every other byte a space."""

_LONG_DIGITS = b"0" * 19
"""In a line translated by :data:`_DIGITS_AS_ZEROS`: a run of digits that may be an integer
beyond 64 bits, which orjson reads as a float. (Two C passes over the line; the regular
expression ``[0-9]{19}`` they replace tried a match at every byte, about a tenth of the
gateway's instructions per call.)"""


def _has_long_digits(line: bytes) -> bool:
    """Whether ``line`` holds a run of 19 digits or more."""
    return _LONG_DIGITS in line.translate(_DIGITS_AS_ZEROS)


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
"""A ``\\u`` escape of a UTF-16 surrogate: alone (not one of a pair) it is no character."""


class NotJSONValue(ValueError):
    """A line Python's json reads, but whose value JSON (RFC 8259, I-JSON) has no place for:
    NaN, Infinity, a number beyond a 64-bit float's range, a lone UTF-16 surrogate. Nothing
    downstream could hold it as it came: the log keeps a ``$repr`` of such a value and the
    wire writes a float NaN or infinity as ``null``, so a call carrying one is refused whole."""


def _no_constant(name: str) -> float:
    raise NotJSONValue(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if value in (math.inf, -math.inf):
        raise NotJSONValue(f"{text[:40]} is not a JSON number (beyond a 64-bit float's range)")
    return value


def decode(line: bytes) -> Any:
    """The JSON value of one line, as ``json.loads`` reads it, refusing what JSON lacks.

    orjson reads the line unless it holds a run of 19 digits or more (an integer beyond 64 bits
    would come back a float; json keeps it exact). What orjson refuses (NaN and Infinity, a
    byte-order mark, UTF-16, lone surrogates, nesting past its limit, anything invalid) is read
    by json, so it is accepted, or refused with json's error (a ``ValueError``, or a
    ``RecursionError`` when nested too deep), as before; except NaN, Infinity, a number that
    overflows a float and a lone surrogate, refused as :class:`NotJSONValue` (a ``ValueError``).
    """
    if not _has_long_digits(line):
        try:
            return orjson.loads(line)
        except orjson.JSONDecodeError:
            pass
    value = json.loads(line, parse_constant=_no_constant, parse_float=_finite)
    if _SURROGATE_ESCAPE.search(line) is not None:
        try:
            json.dumps(value, ensure_ascii=False).encode()
        except UnicodeEncodeError:
            raise NotJSONValue("a lone UTF-16 surrogate (\\ud800-\\udfff) is not text") from None
    return value


def unrepresentable(value: Any) -> str | None:
    """Why ``value`` (read by another parser: the SDK's) holds what :func:`decode` refuses
    (NaN, an infinity, a lone surrogate), or ``None`` when it holds none."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return f"{item!r} is not a JSON number"
        if isinstance(item, str):
            if not item.isascii():
                try:
                    item.encode()
                except UnicodeEncodeError:
                    return "a lone UTF-16 surrogate (\\ud800-\\udfff) is not text"
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


def decode_lenient(line: bytes) -> Any:
    """The value of a line :func:`decode` refused as :class:`NotJSONValue`, as json reads it
    (to find which request it answers)."""
    return json.loads(line)


def encode(message: dict[str, Any]) -> bytes:
    """One message as a line (compact JSON, UTF-8 unescaped, newline-terminated).

    Written by orjson (``OPT_APPEND_NEWLINE``); what it refuses (an integer beyond 64 bits,
    a key that is not a string) is written by json with the same separators. A float NaN or
    infinity is written ``null``, as the SDK's own (pydantic) serializer writes it. A string
    holding a lone surrogate is written with ``\\u`` escapes (it has no UTF-8 form).
    """
    try:
        return orjson.dumps(message, option=orjson.OPT_APPEND_NEWLINE)
    except orjson.JSONEncodeError:
        text = json.dumps(message, separators=(",", ":"), ensure_ascii=False)
    try:
        return text.encode() + b"\n"
    except UnicodeEncodeError:
        return json.dumps(message, separators=(",", ":")).encode() + b"\n"


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
    "LineSplitter",
    "NotJSONValue",
    "Oversized",
    "decode",
    "decode_lenient",
    "unrepresentable",
    "encode",
    "error",
    "response",
    "valid_id",
]
