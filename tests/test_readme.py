"""Every Python block in README.md runs, and prints what the README says it prints."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest
from agent_saga import AgentKit, use_kit

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.DOTALL)


def python_blocks() -> list[tuple[str, str | None]]:
    """Each python block with the text block that follows it (its expected output), if any."""
    blocks = BLOCK.findall(README.read_text())
    out: list[tuple[str, str | None]] = []
    for index, (lang, body) in enumerate(blocks):
        if lang != "python":
            continue
        following = blocks[index + 1] if index + 1 < len(blocks) else None
        out.append((body, following[1] if following and following[0] == "text" else None))
    return out


def test_readme_has_python_blocks() -> None:
    assert len(python_blocks()) >= 3


def test_readme_blocks_run_and_print_what_they_claim(tmp_path: Path) -> None:
    namespace: dict[str, object] = {"__name__": "readme"}
    kit = AgentKit()  # the default durable store, in this test's own home ($AGENT_SAGA_HOME)
    with use_kit(kit):
        for code, expected in python_blocks():
            buffer = io.StringIO()
            with contextlib.redirect_stdout(buffer):
                exec(compile(code, str(README), "exec"), namespace)
            if expected is not None:
                assert buffer.getvalue() == expected, code
    assert kit.verify().ok
    assert (tmp_path / "home" / "log.jsonl").exists()
    kit.close()


def test_readme_names_the_two_commands() -> None:
    text = README.read_text()
    assert "uv run agent-saga demo" in text
    assert "uv run pytest" in text
    assert "pip install uv" in text


@pytest.mark.parametrize("command", ["sagas", "replay", "verify", "halt", "status", "guarantees"])
def test_readme_lists_cli_commands(command: str) -> None:
    assert f"agent-saga {command}" in README.read_text()
