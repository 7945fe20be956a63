"""The README's examples run, against the stand-in, moto and the SQLite and servo stand-ins,
and print what they say."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from agent_saga.testing import run_markdown_examples

if TYPE_CHECKING:
    from conftest import AwsWorld, GitWorld, Moto

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_examples_run(
    git_world: GitWorld,
    aws: AwsWorld,
    moto: Moto,
    stand_in_token: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # mkdtemp() lands in tmp_path
    monkeypatch.setenv("WIDGETS_CLONE", str(git_world.clone))
    monkeypatch.setenv("GITHUB_TOKEN", stand_in_token)
    monkeypatch.setenv("GITHUB_API_URL", git_world.stand_in.url)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto.url)
    assert run_markdown_examples(README) == 5
    assert git_world.remote_file("main", "app.py") == "VERSION = 1\n"
    buckets = [b["Name"] for b in aws.clients.s3.list_buckets()["Buckets"]]
    assert "readme-artifacts" not in buckets
