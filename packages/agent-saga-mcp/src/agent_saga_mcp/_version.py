"""The package's version, from its installed metadata."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("agent-saga-mcp")
except PackageNotFoundError:  # pragma: no cover - running from a source tree that is not installed
    __version__ = "0.0.0"

__all__ = ["__version__"]
