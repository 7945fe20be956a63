"""The client's stdin and stdout as asyncio pipe streams, for serving MCP over stdio.

Pipes (and terminals and sockets) can be read and written by the event loop directly, with no
worker thread per message and no blocking read that a stop would have to wait out. The relay
(:mod:`agent_saga_mcp._relay`) reads and writes them; :class:`PipeLines` and
:class:`PipeWriter` hand them to the SDK's ``stdio_server`` when a client is served by the SDK
instead. While they are in use, file descriptor 1 points at stderr, so nothing printed by
accident can corrupt the protocol stream.

When stdin or stdout is not such a file (a regular file), :func:`client_pipes` yields ``None``
and the caller serves through the SDK's default stdio transport.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from ._wire import DEFAULT_LINE_LIMIT, LineReader, Oversized


class PipeLines:
    """Lines of the client's pipe, as the SDK's ``async for line in stdin`` reads them: first
    the ``lead`` lines already read, then the rest. A line over the limit is left out (and
    said on stderr)."""

    def __init__(self, lines: LineReader, lead: list[bytes] | None = None) -> None:
        self.lines = lines
        self.lead = list(lead or [])

    def __aiter__(self) -> PipeLines:
        return self

    async def __anext__(self) -> str:
        while True:
            line = self.lead.pop(0) if self.lead else await self.lines.next()
            if line is None:
                raise StopAsyncIteration
            if isinstance(line, Oversized):
                print(f"agent-saga mcp: dropped a {line.size}-byte message", file=sys.stderr)
                continue
            return line.decode("utf-8", errors="replace")


class PipeWriter:
    """The client's pipe, as the SDK's stdout writer uses it (``write`` then ``flush``)."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer

    async def write(self, text: str) -> None:
        self.writer.write(text.encode("utf-8"))

    async def flush(self) -> None:
        await self.writer.drain()


@asynccontextmanager
async def client_pipes(
    limit: int = DEFAULT_LINE_LIMIT,
) -> AsyncIterator[tuple[LineReader, asyncio.StreamWriter] | None]:
    """The client's stdin (lines of at most ``limit`` bytes) and stdout as event-loop streams,
    or ``None`` if they cannot be."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limit)
    stdin = os.fdopen(os.dup(0), "rb", buffering=0)
    stdout = os.fdopen(os.dup(1), "wb", buffering=0)
    try:
        read_transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), stdin
        )
    except (OSError, ValueError):
        stdin.close()
        stdout.close()
        yield None
        return
    try:
        write_transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, stdout
        )
    except (OSError, ValueError):
        read_transport.close()
        stdout.close()
        yield None
        return
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        writer = asyncio.StreamWriter(write_transport, protocol, None, loop)
        yield LineReader(reader, limit), writer
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        read_transport.close()
        write_transport.close()


__all__ = ["PipeLines", "PipeWriter", "client_pipes"]
