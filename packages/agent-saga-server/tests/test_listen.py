"""A server's URL is printed only once its socket listens: a client that connects at once is
served, never refused (a script that starts the server and calls it straight away)."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import httpx
import pytest
from agent_saga.cli import main
from click.testing import CliRunner
from plane_testkit import AGENT_SAGA, _stop, server_environment


def _started(tmp_path: Path, command: str, errors: int) -> tuple[subprocess.Popen[str], str]:
    """``agent-saga COMMAND --port 0`` in the test's home, and its base URL once printed."""
    process = subprocess.Popen(
        [AGENT_SAGA, "--home", str(tmp_path / "home"), command, "--port", "0"],
        stdout=subprocess.PIPE, stderr=errors, text=True,
        env=server_environment(), cwd=tmp_path,
    )  # fmt: skip
    assert process.stdout is not None
    first = process.stdout.readline()
    url = next(word for word in first.split() if word.startswith("http://"))
    return process, url.split("/ui/")[0].rstrip("/")


@pytest.mark.parametrize(("command", "path"), [("cloud-server", "/v1/health"), ("ui", "/ui/login")])
def test_a_client_connecting_as_soon_as_the_url_is_printed_is_served(
    tmp_path: Path, command: str, path: str
) -> None:
    process, base = _started(tmp_path, command, subprocess.DEVNULL)
    try:
        answer = httpx.get(base + path, trust_env=False, timeout=30)
        assert answer.status_code == 200, answer.text
    finally:
        _stop(process)


@pytest.mark.parametrize(
    ("command", "stop", "agent_tokens"),
    [("cloud-server", signal.SIGINT, []), ("ui", signal.SIGTERM, ["revoked"])],
)
def test_ctrl_c_or_sigterm_stops_a_server_cleanly(
    tmp_path: Path, command: str, stop: signal.Signals, agent_tokens: list[str]
) -> None:
    """Exit 0, no ``Aborted!``, and the command's own clean-up ran: ``ui`` revoked the token it
    shipped the home's log with (a SIGTERM killed it before its clean-up, leaving it valid)."""
    process, base = _started(tmp_path, command, subprocess.PIPE)
    try:
        health = httpx.get(base + "/v1/health", trust_env=False, timeout=30)
        assert health.status_code == 200  # serving: the signal handlers are in place
        process.send_signal(stop)
        _, errors = process.communicate(timeout=30)
    finally:
        _stop(process)
    assert (process.returncode, errors) == (0, "")
    home = ["--home", str(tmp_path / "home")]
    listed = CliRunner().invoke(main, [*home, "cloud-server", "token", "list"]).output
    states = [line.split()[-1] for line in listed.splitlines() if line.split()[1] == "agent"]
    assert states == agent_tokens
