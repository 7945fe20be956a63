"""agent-saga for any MCP client: a gateway that puts transactions in front of MCP servers.

``agent-saga mcp serve --config gateway.toml`` re-exposes the tools of one or more upstream MCP
servers unchanged; each call passes the gate, its intent is logged before it runs, and when a
call fails the session's earlier calls are undone newest first through the compensations the
configuration declares (other upstream calls). ``agent-saga recover`` finishes the rollback of
a gateway that died (import :mod:`agent_saga_mcp.recovery`).
"""

from ._build import open_gateway
from ._catalog import Route, build_routes
from ._config import (
    ApprovalsDecl,
    CallDecl,
    ConfigError,
    GatewayConfig,
    ProbeDecl,
    ToolDecl,
    UpstreamDecl,
)
from ._config_read import read_config as load_config
from ._elicit import ElicitationChannel
from ._gateway import Gateway
from ._mapping import ArgumentMap, MappingError, Source
from ._recovery import register_compensations
from ._upstream import UpstreamError
from ._version import __version__

__all__ = [
    "ApprovalsDecl",
    "ArgumentMap",
    "CallDecl",
    "ConfigError",
    "ElicitationChannel",
    "Gateway",
    "GatewayConfig",
    "MappingError",
    "ProbeDecl",
    "Route",
    "Source",
    "ToolDecl",
    "UpstreamDecl",
    "UpstreamError",
    "__version__",
    "build_routes",
    "load_config",
    "open_gateway",
    "register_compensations",
]
