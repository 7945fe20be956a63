"""A bare MCP proxy for ``bench/mcp.py``: the floor any proxy on the mcp SDK pays.

It serves stdio with the SDK's low-level server (its OpenTelemetry middleware left out, as the
gateway does), starts ``server.py`` as its upstream, and forwards ``tools/list`` and
``tools/call`` unchanged: no gate, no log, no saga.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

UPSTREAM = Path(__file__).resolve().with_name("server.py")


async def main() -> None:
    params = StdioServerParameters(command=sys.executable, args=[str(UPSTREAM)])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as upstream:
        await upstream.initialize()
        tools = (await upstream.list_tools()).tools

        async def list_tools(
            ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
        ) -> types.ListToolsResult:
            return types.ListToolsResult(tools=tools)

        async def call_tool(
            ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
        ) -> types.CallToolResult:
            request = types.CallToolRequest(params=params)
            result: types.CallToolResult = await upstream.send_request(
                request, types.CallToolResult
            )
            return result

        server: Server[Any] = Server("bare-proxy", on_list_tools=list_tools, on_call_tool=call_tool)
        server.middleware = []
        async with stdio_server() as (client_read, client_write):
            await server.run(client_read, client_write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
