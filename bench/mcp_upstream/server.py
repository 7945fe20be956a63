"""A minimal upstream MCP server for ``bench/mcp.py`` (stdio): ``read`` (REVERSIBLE behind the
gateway), ``put`` and ``remove`` (``put`` is COMPENSABLE, undone by ``remove``). State is in
memory: the upstream's own cost stays small and equal for both paths."""

from __future__ import annotations

from typing import TypedDict

from mcp.server.mcpserver import MCPServer

app = MCPServer("bench-upstream")
store: dict[str, int] = {}


class Item(TypedDict):
    key: str
    value: int


@app.tool()
def read(key: str) -> Item:
    """Read an item."""
    return {"key": key, "value": store.get(key, 0)}


@app.tool()
def put(key: str, value: int) -> Item:
    """Store an item."""
    store[key] = value
    return {"key": key, "value": value}


@app.tool()
def remove(key: str) -> Item:
    """Remove an item."""
    return {"key": key, "value": store.pop(key, 0)}


if __name__ == "__main__":
    app.run()
