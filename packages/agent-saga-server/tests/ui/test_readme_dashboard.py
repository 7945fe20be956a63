"""The README's dashboard section: its command is the one the browser tests start (``ui``
fixture), its default address is the command's, and each page's screenshot is committed."""

from __future__ import annotations

import re
from pathlib import Path

from agent_saga.cli import main
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[4]
README = ROOT / "README.md"


def test_the_readme_section_names_the_command_and_its_default_address() -> None:
    text = README.read_text()
    section = text[text.index("## The dashboard") : text.index("## Proving what happened")]
    assert "uv run agent-saga ui\n" in section
    assert "http://127.0.0.1:8765/ui/" in section
    result = CliRunner().invoke(main, ["ui", "--help"])
    assert result.exit_code == 0
    assert re.search(
        r"--port INTEGER RANGE\s+0 picks a free port.\s+\[default: 8765;", result.output
    )
    images = re.findall(r"\]\((docs/dashboard/[a-z-]+\.png)\)", section)
    assert len(set(images)) == 12  # one per page, and a recorded saga as a diagram
    committed = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs/dashboard").glob("*.png"))
    assert sorted(set(images)) == committed
    for image in images:
        assert (ROOT / image).read_bytes().startswith(b"\x89PNG")
