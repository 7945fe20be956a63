"""Real control-plane processes for the tests: ``agent-saga cloud-server`` under uvicorn on
127.0.0.1, started as a subprocess (in its home, with none of the shell's agent-saga or terminal
settings) and stopped (SIGTERM, then SIGKILL) afterwards."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

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
    printed_admin: bool = False
    """Whether this process printed the first admin token when it started."""

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


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def cloud_servers(*homes: tuple[Path, tuple[str, ...]]) -> Iterator[list[RunningServer]]:
    """Start ``agent-saga --home HOME cloud-server --port 0 ARGS`` for each ``(HOME, ARGS)`` at
    once (an ``ARGS`` may name ``--port``); yield them once every one answers."""
    started: list[tuple[subprocess.Popen[str], TextIO]] = []
    try:
        for home, args in homes:
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
            started.append((process, log))
        pairs = zip(started, homes, strict=True)
        yield [_answering(process, home) for (process, _), (home, _) in pairs]
    finally:
        for process, output in started:
            _stop(process)
            output.close()


@contextmanager
def cloud_server(
    home: Path, *args: str, admin: str | None = None, port: int = 0
) -> Iterator[RunningServer]:
    """One server (:func:`cloud_servers`); ``admin`` is its admin token when it prints none."""
    with cloud_servers((home, ("--port", str(port), *args))) as [running]:
        running.admin = running.admin or admin
        yield running


def _answering(process: subprocess.Popen[str], home: Path) -> RunningServer:
    assert process.stdout is not None
    first = process.stdout.readline()
    if not first.startswith("agent-saga control plane on "):
        process.wait(30)
        raise RuntimeError(f"server did not start: {first!r} {(home / 'server.out').read_text()}")
    url = first.split()[4]
    admin = None
    second = process.stdout.readline()
    if second.startswith("admin token"):
        admin = second.split()[-1]
        process.stdout.readline()
    deadline = time.monotonic() + 60
    with httpx.Client(base_url=url, timeout=2, trust_env=False) as probe:
        while True:
            try:
                if probe.get("/v1/health").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError(f"server did not answer: {(home / 'server.out').read_text()}")
            time.sleep(0.05)
    return RunningServer(url, admin, process, home, printed_admin=admin is not None)


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(15)
    if process.stdout is not None:
        process.stdout.close()
