"""Shared fixtures for this package's tests: an isolated home, no network beyond 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_saga.testing import loopback_only


@pytest.fixture(autouse=True)
def _offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test gets its own agent-saga home and fails on any non-loopback connection."""
    monkeypatch.setenv("AGENT_SAGA_HOME", str(tmp_path / "home"))
    with loopback_only() as refused:
        yield
    assert refused == [], f"network access attempted: {refused}"
