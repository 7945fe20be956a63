"""Where agent-saga keeps its state when nothing else is said."""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "AGENT_SAGA_HOME"
DEFAULT_HOME = ".agent-saga"


def resolve_home(home: str | os.PathLike[str] | None = None) -> Path:
    """The agent-saga home: ``home`` if given, else ``$AGENT_SAGA_HOME``, else ``./.agent-saga``."""
    if home is not None:
        return Path(home)
    env = os.environ.get(HOME_ENV)
    if env:
        return Path(env)
    return Path.cwd() / DEFAULT_HOME
