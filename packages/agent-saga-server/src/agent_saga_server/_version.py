from importlib.metadata import version

__version__ = version("agent-saga-server")
