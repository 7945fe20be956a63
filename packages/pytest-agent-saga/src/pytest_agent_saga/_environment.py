"""The environment a test runs in: none of the shell's settings for agent-saga or the terminal.

The list of variables is the product's own (:mod:`agent_saga.testing.environment`);
:func:`clean_environment` unsets them for one test, and a test that wants one sets it itself
afterwards.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from agent_saga.testing.environment import variables_to_clear

if TYPE_CHECKING:
    import pytest


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
