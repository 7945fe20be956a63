"""pytest plugin for agent-saga.

Isolated homes, scripted tools, chaos runs over every fault point, replay assertions.
"""
