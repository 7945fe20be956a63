"""The repository's own promises: lint, format and strict typing pass; the public API is pinned."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def tool_path(name: str) -> str:
    found = shutil.which(name, path=str(BIN)) or shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed in the project environment (uv sync --all-packages)")
    return found


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, check=False)


def test_ruff_check() -> None:
    result = run(tool_path("ruff"), "check", "--no-cache", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format() -> None:
    result = run(tool_path("ruff"), "format", "--check", "--no-cache", ".")
    assert result.returncode == 0, result.stdout + result.stderr


# One mypy run per group: each group has one conftest.py, so module names stay unique.
TYPED_GROUPS = [
    ["packages/agent-saga-core/src", "packages/agent-saga-core/tests"],
    ["tests", "bench"],
    ["conftest.py"],
    ["packages/pytest-agent-saga/src", "packages/pytest-agent-saga/tests"],
    ["packages/agent-saga-langchain/src", "packages/agent-saga-langchain/tests"],
    ["packages/agent-saga-llamaindex/src", "packages/agent-saga-llamaindex/tests"],
    ["packages/agent-saga-openai-agents/src", "packages/agent-saga-openai-agents/tests"],
    ["packages/agent-saga-slack/src", "packages/agent-saga-slack/tests"],
    ["packages/agent-saga-otel/src", "packages/agent-saga-otel/tests"],
    ["packages/agent-saga-packs/src", "packages/agent-saga-packs/tests"],
    ["packages/agent-saga-mcp/src", "packages/agent-saga-mcp/tests"],
    ["packages/agent-saga-server/src", "packages/agent-saga-server/tests"],
    ["packages/agent-saga-bpmn/src", "packages/agent-saga-bpmn/tests"],
]


@pytest.fixture(scope="session")
def mypy_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for every group's run, in the session's temporary directory: the core and the
    frameworks (pydantic, LangChain, ...) are analysed once, not once per group. mypy checks each
    cached module against its file's path and hash, so a group's own modules are always read."""
    return tmp_path_factory.mktemp("mypy-cache")


@pytest.mark.parametrize("paths", TYPED_GROUPS, ids=lambda paths: paths[0])
def test_mypy_strict(paths: list[str], mypy_cache: Path) -> None:
    result = run(tool_path("mypy"), "--strict", "--cache-dir", str(mypy_cache), *paths)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success" in result.stdout


MAX_MODULE_LINES = 400


def test_every_source_module_is_under_400_lines() -> None:
    """One responsibility per module: a module that outgrows 400 lines is split, not stretched."""
    long = {
        str(path.relative_to(ROOT)): lines
        for path in sorted(ROOT.glob("packages/*/src/**/*.py"))
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}, f"modules over {MAX_MODULE_LINES} lines: {long}"
