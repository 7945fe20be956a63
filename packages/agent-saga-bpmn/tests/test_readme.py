"""The README's examples run and print what they say."""

from __future__ import annotations

from pathlib import Path

from agent_saga.testing import run_markdown_examples

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_examples_run() -> None:
    assert run_markdown_examples(README) == 3
