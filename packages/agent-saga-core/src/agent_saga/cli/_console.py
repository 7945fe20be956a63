"""The consoles commands print to: rich output that degrades to plain text.

Kept apart from :mod:`._render` so that starting the command line imports rich's console and
nothing of the log's views.
"""

from __future__ import annotations

import os

from rich.console import Console

PIPE_WIDTH = 160
"""Line width when output is not a terminal and ``COLUMNS`` is unset (rich would use 80)."""


def make_console(*, no_color: bool, stderr: bool = False) -> Console:
    """A console writing to stdout (or stderr); plain text with ``no_color`` or ``NO_COLOR``."""
    plain_text = no_color or bool(os.environ.get("NO_COLOR"))
    console = Console(
        stderr=stderr,
        color_system=None if plain_text else "auto",
        no_color=plain_text,
        highlight=False,
        soft_wrap=True,
        emoji=False,
    )
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = PIPE_WIDTH
    return console


__all__ = ["PIPE_WIDTH", "make_console"]
