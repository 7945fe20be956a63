"""The README's `uv run pytest` installs the root's dependencies and its dev group only (not the
members' dev groups, which `uv sync --all-packages` adds): so every member's test dependency must
also be named by the root, or a fresh clone's suite fails on a missing module."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _name(requirement: str) -> str:
    """The distribution a requirement names, normalised (PEP 503), without extras or versions."""
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement.strip())
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


def _root_names() -> set[str]:
    root = tomllib.loads((ROOT / "pyproject.toml").read_text())
    named = [*root["project"]["dependencies"], *root["dependency-groups"]["dev"]]
    return {_name(r) for r in named if isinstance(r, str)}


def test_every_members_test_dependency_is_installed_by_a_plain_uv_run() -> None:
    root = _root_names()
    missing = {}
    for pyproject in sorted((ROOT / "packages").glob("*/pyproject.toml")):
        groups = tomllib.loads(pyproject.read_text()).get("dependency-groups", {})
        names = {_name(r) for r in groups.get("dev", []) if isinstance(r, str)}
        if names - root:
            missing[pyproject.parent.name] = sorted(names - root)
    assert missing == {}, f"add these to the root's dev group: {missing}"


def test_the_check_sees_a_missing_dependency() -> None:
    assert _name("moto[ec2,iam,s3]>=5.0") == "moto"
    assert _name("PyGithub>=2.4") == "pygithub"
    assert "moto" in _root_names()
    assert "surely-not-a-dependency" not in _root_names()


def test_the_commands_that_listen_do_not_share_a_default_port() -> None:
    """``agent-saga ui``, ``agent-saga cloud-server`` and ``agent-saga mcp serve --http`` run
    side by side on one machine with their defaults."""
    import click
    from agent_saga_mcp.cli import mcp
    from agent_saga_server.cli import cloud_server
    from agent_saga_server.dashboard.cli import ui

    def default_port(command: click.Command) -> object:
        (port,) = [p for p in command.params if p.name == "port"]
        return port.default

    serve_mcp = mcp.commands["serve"] if isinstance(mcp, click.Group) else mcp
    ports = [default_port(ui), default_port(cloud_server), default_port(serve_mcp)]
    assert len(set(ports)) == 3, ports
