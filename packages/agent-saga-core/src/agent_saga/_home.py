"""Where agent-saga keeps its state when nothing else is said."""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "AGENT_SAGA_HOME"
DEFAULT_HOME = ".agent-saga"


def resolve_home(home: str | os.PathLike[str] | None = None) -> Path:
    """The agent-saga home.

    In order: ``home`` if given; ``$AGENT_SAGA_HOME``; ``home`` in the project's configuration
    (``agent-saga.toml`` or ``[tool.agent-saga]`` in ``pyproject.toml``); ``./.agent-saga``.
    """
    if home is not None:
        return Path(home)
    env = os.environ.get(HOME_ENV)
    if env:
        return Path(env)
    from ._config import find_config  # deferred: only a call without a home reads files

    configured = find_config().home
    return configured if configured is not None else Path.cwd() / DEFAULT_HOME
