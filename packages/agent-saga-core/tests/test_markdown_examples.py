"""The helper that runs a README's examples: blocks share a namespace; printed text must match."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_saga.testing import run_markdown_examples

FENCE = "```"


def write(tmp_path: Path, *blocks: tuple[str, str]) -> Path:
    path = tmp_path / "README.md"
    path.write_text("".join(f"{FENCE}{lang}\n{body}{FENCE}\n\nprose\n\n" for lang, body in blocks))
    return path


def test_blocks_run_in_order_and_output_matches(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        ("python", "x = 2\n"),
        ("python", "print(x * 21)\n"),
        ("text", "42\n"),
        ("bash", "echo not run\n"),
    )
    assert run_markdown_examples(path) == 2


def test_a_wrong_output_fails(tmp_path: Path) -> None:
    path = write(tmp_path, ("python", "print('yes')\n"), ("text", "no\n"))
    with pytest.raises(AssertionError, match="printed 'yes"):
        run_markdown_examples(path)
