"""The README's examples run, against the stand-in, moto and the SQLite and servo stand-ins,
and print what they say.

They run in a fresh interpreter, as a user's script would: the examples declare their tools
and compensators process-wide (no kit of the test's own), so another test's ``payments.refund``
in this process must not meet them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conftest import AwsWorld, GitWorld, Moto

README = Path(__file__).resolve().parents[1] / "README.md"
RUN = """
import sys
from agent_saga.testing import loopback_only, run_markdown_examples

with loopback_only() as refused:
    count = run_markdown_examples(sys.argv[1])
print(count, refused)
"""


def test_the_readme_examples_run(
    git_world: GitWorld, aws: AwsWorld, moto: Moto, stand_in_token: str, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "TMPDIR": str(tmp_path),  # tempfile.mkdtemp() lands in this test's directory
        "WIDGETS_CLONE": str(git_world.clone),
        "GITHUB_TOKEN": stand_in_token,
        "GITHUB_API_URL": git_world.stand_in.url,
        "AWS_ENDPOINT_URL": moto.url,
    }
    done = subprocess.run(
        [sys.executable, "-c", RUN, str(README)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == "5 []\n"
    assert git_world.remote_file("main", "app.py") == "VERSION = 1\n"
    buckets = [b["Name"] for b in aws.clients.s3.list_buckets()["Buckets"]]
    assert "readme-artifacts" not in buckets
    assert any(tmp_path.iterdir())
