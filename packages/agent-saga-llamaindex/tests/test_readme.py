"""The README's example runs and prints what it says."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_saga.testing import run_markdown_examples

README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecationWarning:inspect")
def test_readme_example_runs() -> None:
    assert run_markdown_examples(README) == 3
