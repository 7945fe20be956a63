"""Fixtures for every test: an isolated home and no network beyond 127.0.0.1 in this process.

The helpers the tests share are in ``mcp_testkit`` (importable from here: this directory is
put on ``sys.path``, as the test files are imported by path).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_saga.testing import loopback_only

sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test has its own home and may reach no host but 127.0.0.1 (in this process)."""
    monkeypatch.setenv("AGENT_SAGA_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("AGENT_SAGA_STORE", raising=False)
    monkeypatch.delenv("AGENT_SAGA_MCP_CONFIG", raising=False)
    with loopback_only() as refused:
        yield
    assert refused == [], f"network access attempted: {refused}"
