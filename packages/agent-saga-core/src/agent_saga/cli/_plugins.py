"""Commands other packages add to ``agent-saga`` through the ``agent_saga.commands`` entry points.

A distribution declares, in its ``pyproject.toml``::

    [project.entry-points."agent_saga.commands"]
    mcp = "agent_saga_mcp.cli:mcp"

and ``agent-saga mcp ...`` runs that click command under the ``agent-saga`` group, so it gets the
global ``--home`` and ``--no-color`` through :func:`agent_saga.cli.current_settings`. The core
never imports such a package: a name is listed from the entry point's metadata and loaded only
when it is run or its help is shown. A built-in command of the same name wins.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

import click

from ._errors import CliError

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

GROUP = "agent_saga.commands"


@cache
def _entry_points() -> dict[str, EntryPoint]:
    from importlib.metadata import entry_points  # deferred: a built-in command never needs it

    return {point.name: point for point in entry_points(group=GROUP)}


def plugin_commands() -> list[str]:
    """Names of the commands installed packages declare (nothing is imported)."""
    return sorted(_entry_points())


def load_plugin_command(name: str) -> click.Command:
    """The click command behind entry point ``name``.

    Raises:
        CliError: the package cannot be imported, or its entry point is not a click command;
            the message names the distribution and the entry point.
    """
    point = _entry_points()[name]
    where = f"{point.dist.name if point.dist else 'an installed package'} ({point.value})"
    try:
        command = point.load()
    except Exception as exc:  # any import-time failure of a third-party package
        raise CliError(f"the '{name}' command from {where} cannot be loaded: {exc}") from exc
    if not isinstance(command, click.Command):
        raise CliError(f"the '{name}' command from {where} is not a click command")
    return command
