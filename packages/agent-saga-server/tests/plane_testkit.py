"""Real control-plane processes for the tests: ``agent-saga cloud-server`` under uvicorn on
127.0.0.1, started as a subprocess (in its home, with none of the shell's agent-saga or terminal
settings) and stopped (SIGTERM, then SIGKILL) afterwards."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from agent_saga.testing.environment import variables_to_clear

AGENT_SAGA = str(Path(sys.executable).parent / "agent-saga")
HOSTILE_BODY_LIMIT = 256 * 1024
"""The body limit of the ``hostile`` server (``--max-body-bytes``)."""
CONSOLE_ORIGIN = "https://console.example"
"""The one browser origin the ``hostile`` server allows (``--cors-origin``)."""


@dataclass
class RunningServer:
    url: str
    admin: str | None
    process: subprocess.Popen[str]
    home: Path

    def client(self, token: str | None = None, timeout: float = 10.0) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=timeout, trust_env=False)

    def token(self, scope: str, subject: str, origin: str | None = None, **extra: object) -> str:
        assert self.admin is not None
        with self.client(self.admin) as client:
            body: dict[str, object] = {"scope": scope, "subject": subject, **extra}
            if origin is not None:
                body["origin"] = origin
            answer = client.post("/v1/tokens", json=body)
            answer.raise_for_status()
            return str(answer.json()["token"])


def server_environment() -> dict[str, str]:
    """This process's environment without the variables that change what agent-saga does."""
    cleared = set(variables_to_clear(os.environ))
    env = {name: value for name, value in os.environ.items() if name not in cleared}
    return {**env, "PYTHONUNBUFFERED": "1"}


@contextmanager
def cloud_server(home: Path, *args: str, admin: str | None = None) -> Iterator[RunningServer]:
    """Start ``agent-saga --home HOME cloud-server --port 0 ARGS``; yield it once it answers."""
    home.mkdir(parents=True, exist_ok=True)
    log = (home / "server.out").open("w")
    process = subprocess.Popen(
        [AGENT_SAGA, "--home", str(home), "cloud-server", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        env=server_environment(),
        cwd=home,
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        if not first.startswith("agent-saga control plane on "):
            process.wait(30)
            raise RuntimeError(
                f"server did not start: {first!r} {(home / 'server.out').read_text()}"
            )
        url = first.split()[4]
        second = process.stdout.readline()
        if second.startswith("admin token"):
            admin = second.split()[-1]
            process.stdout.readline()
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(url + "/v1/health", timeout=2, trust_env=False).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError("server did not answer")
            time.sleep(0.1)
        yield RunningServer(url, admin, process, home)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(15)
        if process.stdout is not None:
            process.stdout.close()
        log.close()
