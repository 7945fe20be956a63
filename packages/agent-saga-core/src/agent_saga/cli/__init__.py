"""The ``agent-saga`` command line.

``main`` is the console script; :func:`current_settings` gives a command added through the
``agent_saga.commands`` entry points the global options (the home, the consoles).
"""

from ._main import main
from ._settings import Settings, current_settings

__all__ = ["Settings", "current_settings", "main"]
