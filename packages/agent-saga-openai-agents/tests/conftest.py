"""Shared fixtures for this package's tests: an isolated home, a kit, no network, no tracing."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_saga import AgentKit, SequentialIds
from agent_saga.testing import loopback_only
from agents import set_tracing_disabled
from pytest_agent_saga import clean_environment


@pytest.fixture(autouse=True)
def _offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No shell setting for agent-saga, the terminal or OpenAI; own agent-saga home; trace
    export off; any non-loopback connection fails the test."""
    clean_environment(monkeypatch, prefixes=["OPENAI_"])
    monkeypatch.setenv("AGENT_SAGA_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")
    set_tracing_disabled(True)
    with loopback_only() as refused:
        yield
    assert refused == [], f"network access attempted: {refused}"


@pytest.fixture
def kit(tmp_path: Path) -> Iterator[AgentKit]:
    with AgentKit(home=tmp_path / "home", ids=SequentialIds()) as k:
        yield k


@pytest.fixture
def sync_runs() -> Iterator[None]:
    """``Runner.run_sync`` keeps the thread's default event loop open on purpose; close it."""
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        loop = asyncio.get_event_loop_policy().get_event_loop()
    loop.close()
    asyncio.set_event_loop(None)
