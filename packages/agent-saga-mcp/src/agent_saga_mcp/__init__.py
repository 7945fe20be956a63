"""agent-saga for any MCP client: a gateway that puts transactions in front of MCP servers.

``agent-saga mcp serve --config gateway.toml`` re-exposes the tools of one or more upstream MCP
servers unchanged; each call passes the gate, its intent is logged before it runs, and when a
call fails the session's earlier calls are undone newest first through the compensations the
configuration declares (other upstream calls). ``agent-saga recover`` finishes the rollback of
a gateway that died (import :mod:`agent_saga_mcp.recovery`).

Names load on first use: ``agent-saga --help`` lists the ``mcp`` command without importing the
mcp SDK.
"""

import importlib
from typing import TYPE_CHECKING

from ._version import __version__

if TYPE_CHECKING:
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
    from ._config_read import load_config
    from ._elicit import ElicitationChannel
    from ._gateway import Gateway
    from ._mapping import ArgumentMap, MappingError, Source
    from ._recovery import register_compensations
    from ._upstream import UpstreamError

_LAZY = {
    "ApprovalsDecl": "_config",
    "ArgumentMap": "_mapping",
    "CallDecl": "_config",
    "ConfigError": "_config",
    "ElicitationChannel": "_elicit",
    "Gateway": "_gateway",
    "GatewayConfig": "_config",
    "MappingError": "_mapping",
    "ProbeDecl": "_config",
    "Route": "_catalog",
    "Source": "_mapping",
    "ToolDecl": "_config",
    "UpstreamDecl": "_config",
    "UpstreamError": "_upstream",
    "build_routes": "_catalog",
    "load_config": "_config_read",
    "open_gateway": "_build",
    "register_compensations": "_recovery",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'agent_saga_mcp' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"agent_saga_mcp.{module}"), name)
    globals()[name] = value
    return value


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
