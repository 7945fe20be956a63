"""agent-saga-server."""
