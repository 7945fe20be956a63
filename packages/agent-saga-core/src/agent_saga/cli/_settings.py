"""What every command gets from the global options, and how a command reaches it.

``agent-saga --home PATH --no-color <command>`` resolves the home and the consoles once, in the
group; every command (built in or added by another package through the ``agent_saga.commands``
entry-point group) reads them with :func:`current_settings` or :data:`pass_settings`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click
from rich.console import Console


@dataclass(frozen=True)
class Settings:
    """The global options, resolved: the home (and whether it was given) and two consoles."""

    home: Path
    home_given: bool
    console: Console
    err: Console


pass_settings = click.make_pass_decorator(Settings)
"""Decorator handing a command the :class:`Settings` of the ``agent-saga`` group it runs under."""


def current_settings() -> Settings:
    """The :class:`Settings` of the running ``agent-saga`` invocation.

    Raises:
        RuntimeError: when called outside a command run under the ``agent-saga`` group.
    """
    obj = click.get_current_context().find_root().obj
    if not isinstance(obj, Settings):
        raise RuntimeError("not running under the agent-saga command group")
    return obj
