"""The package's surface, what importing it loads, and its place under the agent-saga command."""

from __future__ import annotations

import importlib
import subprocess
from importlib.metadata import entry_points

import agent_saga_mcp
from agent_saga.testing import installed_from, modules_after_import
from mcp_testkit import AGENT_SAGA

PUBLIC = [
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


def test_the_public_surface_is_pinned() -> None:
    assert agent_saga_mcp.__all__ == PUBLIC
    for name in PUBLIC:
        assert getattr(agent_saga_mcp, name) is not None


def test_the_sdk_is_the_installed_official_mcp_distribution() -> None:
    assert installed_from(importlib.import_module("mcp"), "mcp")


def test_importing_the_package_loads_neither_the_sdk_nor_a_framework() -> None:
    loaded = modules_after_import("agent_saga_mcp")
    others = {"mcp", "mcp_types", "uvicorn", "starlette", "langchain_core", "llama_index", "agents"}
    assert loaded & others == set()


def test_the_mcp_command_is_added_to_agent_saga_by_entry_point() -> None:
    [point] = [p for p in entry_points(group="agent_saga.commands") if p.name == "mcp"]
    assert point.value == "agent_saga_mcp.cli:mcp"
    listed = subprocess.run([AGENT_SAGA, "--help"], capture_output=True, text=True, check=False)
    assert listed.returncode == 0
    assert "The MCP gateway" in listed.stdout
    help_text = subprocess.run(
        [AGENT_SAGA, "mcp", "--help"], capture_output=True, text=True, check=False
    )
    assert help_text.returncode == 0
    assert "serve" in help_text.stdout
    assert "check" in help_text.stdout
