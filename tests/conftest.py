from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each end-to-end test runs in its own working directory and agent-saga home."""
    home = tmp_path / "home"
    monkeypatch.setenv("AGENT_SAGA_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    return home
