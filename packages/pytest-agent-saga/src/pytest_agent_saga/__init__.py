"""pytest plugin for agent-saga: isolated homes, scripted tools, chaos runs over every fault point, replay assertions."""
