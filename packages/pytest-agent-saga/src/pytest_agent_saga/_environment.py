"""The environment a test runs in: none of the shell's settings for agent-saga or the terminal.

agent-saga reads its home, store and key passphrase from ``AGENT_SAGA_*`` variables, and its
command line (through click and rich) decides colour, width and terminal features from
``NO_COLOR``, ``FORCE_COLOR``, ``TERM``, ``COLUMNS`` and a few more. A developer's shell often
sets some of them (``NO_COLOR=1`` is common), and a test that inherits them tests that shell,
not the product. :func:`clean_environment` unsets them for one test; a test that wants one sets
it itself afterwards.

This module imports nothing outside the standard library: the repository's own ``conftest.py``
loads it from its file, in environments where this package is not installed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

PRODUCT_PREFIXES = ("AGENT_SAGA_", "_AGENT_SAGA_")
"""agent-saga's own settings; ``_AGENT_SAGA_COMPLETE`` makes the ``agent-saga`` script print a
shell-completion script instead of running (click)."""

KEPT_VARIABLES = frozenset({"AGENT_SAGA_TEST_PG_URL"})
"""Settings for the tests themselves, which a test asks for by name (the PostgreSQL server)."""

TERMINAL_VARIABLES = (
    "NO_COLOR",
    "FORCE_COLOR",
    "CLICOLOR",
    "CLICOLOR_FORCE",
    "TERM",
    "COLORTERM",
    "COLUMNS",
    "LINES",
    "TTY_COMPATIBLE",
    "TTY_INTERACTIVE",
    "JUPYTER_COLUMNS",
    "JUPYTER_LINES",
)
"""What the command line's output depends on besides its arguments: rich reads all of these
but the ``CLICOLOR`` pair, which other tools honour."""


def variables_to_clear(
    environ: Mapping[str, str], *, prefixes: Iterable[str] = (), names: Iterable[str] = ()
) -> list[str]:
    """The variables of ``environ`` that :func:`clean_environment` unsets, sorted.

    Args:
        environ: the environment to look at (``os.environ``).
        prefixes: more prefixes to clear (a member's framework: ``"SLACK_"``).
        names: more variables to clear by name.
    """
    starts = (*PRODUCT_PREFIXES, *prefixes)
    exact = {*TERMINAL_VARIABLES, *names}
    return sorted(
        name
        for name in environ
        if name not in KEPT_VARIABLES and (name in exact or name.startswith(starts))
    )


def clean_environment(
    monkeypatch: pytest.MonkeyPatch, *, prefixes: Iterable[str] = (), names: Iterable[str] = ()
) -> list[str]:
    """Unset, for the rest of this test, every variable that changes what agent-saga does or
    prints: ``AGENT_SAGA_*`` (but ``AGENT_SAGA_TEST_PG_URL``) and the terminal's settings.

    ``monkeypatch`` puts every value back when the test ends. Subprocesses the test starts
    inherit ``os.environ``, so they see the cleaned environment too, unless the test builds
    their environment from something else.

    Args:
        monkeypatch: the test's ``monkeypatch`` fixture.
        prefixes: more prefixes to clear (a member's framework: ``"SLACK_"``).
        names: more variables to clear by name.

    Returns:
        The names that were set and are now unset.
    """
    cleared = variables_to_clear(os.environ, prefixes=prefixes, names=names)
    for name in cleared:
        monkeypatch.delenv(name)
    return cleared
