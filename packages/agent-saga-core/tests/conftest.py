"""Shared fixtures: an own agent-saga home per test, and a kit on it.

The shell's agent-saga and terminal settings (``AGENT_SAGA_STORE``, ``NO_COLOR``, ...) are
cleared for the whole session by the repository's ``conftest.py``, with
``pytest_agent_saga.clean_environment``; pytest reads that file for these tests in every run,
this package's own environment included. It is not called here: pytest-agent-saga depends on
agent-saga, so it is not in this package's own environment.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_saga import AgentKit, SequentialIds


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own agent-saga home; nothing lands in the working directory."""
    home = tmp_path / "home"
    monkeypatch.setenv("AGENT_SAGA_HOME", str(home))
    for name in ("AGENT_SAGA_CHAIN_KEY_FILE", "AGENT_SAGA_STORE_SCHEMA"):
        monkeypatch.delenv(name, raising=False)  # a key or schema from the shell stays out
    return home


@pytest.fixture
def home(_isolated_home: Path) -> Path:
    return _isolated_home


@pytest.fixture
def kit(home: Path) -> Iterator[AgentKit]:
    with AgentKit(home=home, ids=SequentialIds()) as k:
        yield k
