"""The client's stdin and stdout as asyncio pipe streams, for serving MCP over stdio.

The SDK's default stdio server reads and writes through worker threads (two thread hops per
message written, one blocking read). For a gateway that adds one hop to every tool call, that
is most of its cost, and a blocked read means stopping waits for input that may never come.
Pipes (and terminals and sockets) can be read and written by the event loop directly; these are
handed to the SDK's ``stdio_server`` instead. While they are in use, file descriptor 1 points at
stderr, so nothing printed by accident can corrupt the protocol stream.

When stdin or stdout is not such a file (a regular file), :func:`client_pipes` yields ``None``
and the SDK's default is used.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

_LINE_LIMIT = 64 * 1024 * 1024
"""The longest message line accepted from the client (bytes)."""


class PipeLines:
    """Lines of the client's pipe, as ``async for line in stdin`` reads them."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader

    def __aiter__(self) -> PipeLines:
        return self

    async def __anext__(self) -> str:
        line = await self.reader.readline()
        if not line:
            raise StopAsyncIteration
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
async def client_pipes() -> AsyncIterator[tuple[PipeLines, PipeWriter] | None]:
    """The client's stdin and stdout as event-loop streams, or ``None`` if they cannot be."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=_LINE_LIMIT)
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
        yield PipeLines(reader), PipeWriter(writer)
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        read_transport.close()
        write_transport.close()


__all__ = ["PipeLines", "PipeWriter", "client_pipes"]
