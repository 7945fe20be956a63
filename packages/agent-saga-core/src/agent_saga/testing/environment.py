"""Which environment variables change what agent-saga does or prints.

agent-saga reads its home, store, chain key and passphrase from ``AGENT_SAGA_*`` variables, and
its command line (through click and rich) decides colour, width and terminal features from
``NO_COLOR``, ``FORCE_COLOR``, ``TERM``, ``COLUMNS`` and a few more. A test that inherits them
from a developer's shell tests that shell, not the product: :func:`variables_to_clear` names
what a test should unset (the pytest plugin's ``clean_environment`` and ``saga_home`` do it).
Only the standard library is used here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

PRODUCT_PREFIXES = ("AGENT_SAGA_", "_AGENT_SAGA_")
"""agent-saga's own settings; ``_AGENT_SAGA_COMPLETE`` makes the ``agent-saga`` script print a
shell-completion script instead of running (click)."""

KEPT_VARIABLES = frozenset({"AGENT_SAGA_TEST_PG_URL", "AGENT_SAGA_TEST_PHOENIX"})
"""Settings for the tests themselves, which a test asks for by name (the PostgreSQL server, the
Phoenix executable)."""

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
