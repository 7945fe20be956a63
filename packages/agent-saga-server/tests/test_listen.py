"""A server's URL is printed only once its socket listens: a client that connects at once is
served, never refused (a script that starts the server and calls it straight away)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest
from plane_testkit import AGENT_SAGA, _stop, server_environment


@pytest.mark.parametrize(("command", "path"), [("cloud-server", "/v1/health"), ("ui", "/ui/login")])
def test_a_client_connecting_as_soon_as_the_url_is_printed_is_served(
    tmp_path: Path, command: str, path: str
) -> None:
    process = subprocess.Popen(
        [AGENT_SAGA, "--home", str(tmp_path / "home"), command, "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env=server_environment(), cwd=tmp_path,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        url = next(word for word in first.split() if word.startswith("http://"))
        base = url.split("/ui/")[0].rstrip("/")
        answer = httpx.get(base + path, trust_env=False, timeout=30)
        assert answer.status_code == 200, answer.text
    finally:
        _stop(process)
