"""Shared fixtures for this package's tests.

Inner pytest runs (``pytester``) always get ``-p no:langsmith_plugin`` (langchain-core's plugin
is re-imported on every in-process run and costs over a second each time) and ``-W error``, so
a warning from the plugin fails the inner run as it would in a user's strict suite.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from pytest_agent_saga import clean_environment

INNER_ARGS = ("-p", "no:langsmith_plugin", "-W", "error", "-p", "no:cacheprovider")

Run = Callable[..., pytest.RunResult]


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No shell setting for agent-saga or the terminal reaches a test (or an inner run)."""
    clean_environment(monkeypatch)


@pytest.fixture
def run(pytester: pytest.Pytester) -> Run:
    """``run("-k", "name")``: pytest in this process on the files the test wrote."""

    def inner(*args: str) -> pytest.RunResult:
        return pytester.runpytest(*INNER_ARGS, *args)

    return inner
