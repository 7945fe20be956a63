"""The ``agent-saga`` command line.

``main`` is the console script; :func:`current_settings` gives a command added through the
``agent_saga.commands`` entry points the global options (the home, the consoles), and
:func:`saga_records` reads one saga's records from the configured log (file or PostgreSQL).
"""

from typing import TYPE_CHECKING, Any

from ._main import main
from ._settings import Settings, current_settings

if TYPE_CHECKING:
    from ._sagarecords import saga_records


if not TYPE_CHECKING:  # type checkers see the import above, and so refuse a misspelled name

    def __getattr__(name: str) -> Any:
        """``saga_records``, imported at its first use (the command line does not need it)."""
        if name != "saga_records":
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        from ._sagarecords import saga_records

        globals()["saga_records"] = saga_records
        return saga_records


def __dir__() -> list[str]:
    """The module's names, ``saga_records`` included before its first use."""
    return sorted({*globals(), *__all__})


__all__ = ["Settings", "current_settings", "main", "saga_records"]
