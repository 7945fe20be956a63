"""The ``agent-saga`` command line.

``main`` is the console script; :func:`current_settings` gives a command added through the
``agent_saga.commands`` entry points the global options (the home, the consoles), and
:func:`saga_records` reads one saga's records from the configured log (file or PostgreSQL).
"""

from ._main import main
from ._sagarecords import saga_records
from ._settings import Settings, current_settings

__all__ = ["Settings", "current_settings", "main", "saga_records"]
