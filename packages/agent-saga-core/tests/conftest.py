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
