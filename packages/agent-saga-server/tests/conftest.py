"""Fixtures: an isolated home per test, no network beyond 127.0.0.1, and real control-plane
processes (``agent-saga cloud-server`` under uvicorn) shared per module where a module's tests
only add their own origins, tokens and approvals to it.

The helpers are in ``plane_testkit`` (importable from here: this directory is put on
``sys.path``, as the test files are imported by path).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_saga.testing import loopback_only

sys.path.insert(0, str(Path(__file__).resolve().parent))

from plane_testkit import RunningServer, cloud_server  # noqa: E402


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("AGENT_SAGA_HOME", str(tmp_path / "home"))
    for name in ("AGENT_SAGA_STORE", "AGENT_SAGA_SERVER", "AGENT_SAGA_SERVER_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    with loopback_only() as refused:
        yield
    assert refused == [], f"network access attempted: {refused}"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """One SQLite-backed control plane for the module's tests."""
    with cloud_server(tmp_path_factory.mktemp("plane")) as running:
        yield running
