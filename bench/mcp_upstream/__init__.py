"""The upstream MCP server and the bare proxy bench/mcp.py starts as scripts (a package only so
that type checkers name them apart from bench/server.py)."""
