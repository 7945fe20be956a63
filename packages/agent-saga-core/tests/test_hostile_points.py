"""Garbled resume points and checkpointer frontiers are ignored, never fatal.

``checkpoints/verified/*.json`` (where ``verify --since`` resumes) and
``checkpoints/frontier.json`` (where a kit's checkpointer resumes) are plain files in the home:
an unlucky disk or a hostile user can leave anything there. Each file below is one such: JSON
nested past the parser's recursion, a size or an offset of ``1e400`` (infinity once read). The
command and the kit must ignore it (a full read instead) and still check the whole log.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agent_saga import REVERSIBLE, AgentKit, Entry, FileLogStore
from agent_saga.cli import main
from click.testing import CliRunner, Result

RECORDS = 30


def cli(home: Path, *args: str) -> Result:
    return CliRunner().invoke(main, ["--home", str(home), *args])


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A log of 30 records, a checkpoint of it, verified once (so a resume point exists)."""
    home = tmp_path / "home"
    with FileLogStore(home) as store:
        for n in range(RECORDS):
            store.append([Entry("t", None, {"n": n}, n)], sync=True)
    assert cli(home, "checkpoint").exit_code == 0
    assert cli(home, "verify").exit_code == 0
    return home


def _garbled(point: Path, how: str) -> bytes:
    if how == "nested":
        return b"[" * 60_000
    stored = json.loads(point.read_text())
    stored[how] = "INF"
    return json.dumps(stored).replace('"INF"', "1e400").encode()


GARBLES = ["nested", "size", "offset"]


@pytest.mark.parametrize("how", GARBLES)
def test_verify_since_ignores_a_garbled_resume_point(home: Path, how: str) -> None:
    [point] = (home / "checkpoints" / "verified").glob("*.json")
    point.write_bytes(_garbled(point, how))
    result = cli(home, "verify", "--since", "latest")
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 0, result.output
    assert f"resume point {point.name} not used" in result.output
    assert f"log intact: {RECORDS} records" in result.output


@pytest.mark.parametrize("how", GARBLES)
def test_a_kit_ignores_a_garbled_frontier_file(home: Path, how: str) -> None:
    [point] = (home / "checkpoints" / "verified").glob("*.json")
    (home / "checkpoints" / "frontier.json").write_bytes(_garbled(point, how))
    point.unlink()
    with AgentKit(home=home, checkpoint_every=1, checkpoint_interval=3600) as kit:

        @kit.tool(name="t.add", semantics=REVERSIBLE)
        def add(x: int) -> int:
            return x + 1

        with kit.transaction("one"):
            add(1)
        published = kit.checkpoint()
        assert kit.checkpointer is not None
        assert kit.checkpointer._resumed_at == 0  # read from record 1
    assert published.size > RECORDS
    result = cli(home, "verify")
    assert result.exit_code == 0, result.output
    assert f"consistent with the latest checkpoint ({published.size} records)" in result.output
