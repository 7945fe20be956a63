"""Shared fixtures for this package's tests: an isolated home, a kit, no network."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_saga import AgentKit, SequentialIds
from agent_saga.testing import loopback_only
from pytest_agent_saga import clean_environment

LANGSMITH = ("LANGSMITH_", "LANGCHAIN_")
"""langsmith reads its settings under both prefixes (tracing, endpoint, key)."""


@pytest.fixture(autouse=True)
def _offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No shell setting for agent-saga, the terminal or LangSmith; an own agent-saga home;
    any non-loopback connection fails the test."""
    clean_environment(monkeypatch, prefixes=LANGSMITH)
    monkeypatch.setenv("AGENT_SAGA_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LANGSMITH_TRACING", "false")
    with loopback_only() as refused:
        yield
    assert refused == [], f"network access attempted: {refused}"


@pytest.fixture
def kit(tmp_path: Path) -> Iterator[AgentKit]:
    with AgentKit(home=tmp_path / "home", ids=SequentialIds()) as k:
        yield k
