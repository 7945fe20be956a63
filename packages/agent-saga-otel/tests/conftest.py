"""Shared fixtures: an isolated home, no network but loopback, a local tracer provider, and a
real Phoenix server for the tests that need one."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from agent_saga import AgentKit, SequentialIds
from agent_saga.testing import loopback_only
from agent_saga_otel import OTelObserver, SagaIdSpanProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pytest_agent_saga import clean_environment

EXPORTERS = ("OTEL_", "PHOENIX_", "LANGSMITH_", "LANGCHAIN_")
"""The exporters' own settings (endpoints, headers, keys, sampling, ``OTEL_SDK_DISABLED``)."""
PROXIES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


@pytest.fixture(autouse=True)
def _offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No shell setting for agent-saga, the terminal, OpenTelemetry, Phoenix or LangSmith, and
    no proxy; an own agent-saga home; any non-loopback connection fails the test."""
    clean_environment(monkeypatch, prefixes=EXPORTERS, names=PROXIES)
    monkeypatch.setenv("AGENT_SAGA_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LANGSMITH_TRACING", "false")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    with loopback_only() as refused:
        yield
    assert refused == [], f"network access attempted: {refused}"


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    """A local provider (never the global one): saga ids copied, spans kept in memory."""
    tp = TracerProvider()
    tp.add_span_processor(SagaIdSpanProcessor())
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    yield tp
    tp.shutdown()


@pytest.fixture
def kit(tmp_path: Path, provider: TracerProvider) -> Iterator[AgentKit]:
    with AgentKit(
        home=tmp_path / "home", ids=SequentialIds(), observers=[OTelObserver(provider)]
    ) as k:
        yield k


# -- a real Phoenix server, started once per session ----------------------------------------------

PHOENIX = "AGENT_SAGA_TEST_PHOENIX"
"""The ``phoenix`` executable of arize-phoenix 20.x (``.ci/run`` installs it in its own tool
environment and sets this); tests that need it skip without it, and fail under ``CI``."""
PHOENIX_FIXTURE = "phoenix_server"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class PhoenixServer:
    """A Phoenix process on 127.0.0.1 with its own working directory (SQLite inside)."""

    process: subprocess.Popen[bytes]
    url: str
    log: Path

    def wait_until_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = self.log.read_text(errors="replace")[-2000:]
                pytest.fail(f"Phoenix exited with {self.process.returncode}:\n{tail}")
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        pytest.fail(f"Phoenix did not answer on {self.url} within {timeout:.0f} s")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _start_phoenix(executable: str, workdir: Path) -> PhoenixServer:
    """Start Phoenix without waiting for it (it takes tens of seconds to import and migrate).

    Only its own settings and ``PATH`` reach it: telemetry, web fonts and other downloads, the
    agent assistant and the MCP server are off; HTTP listens on 127.0.0.1 only. (Its gRPC
    receiver binds a free port on all interfaces: Phoenix has no setting for that address.)
    """
    port = _free_port()
    home = workdir / "home"
    home.mkdir(parents=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "TMPDIR": str(workdir),
        "NO_PROXY": "*",
        "PHOENIX_WORKING_DIR": str(workdir / "phoenix"),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(_free_port()),
        "PHOENIX_TELEMETRY_ENABLED": "false",
        "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
        "PHOENIX_DISABLE_AGENT_ASSISTANT": "true",
        "PHOENIX_ENABLE_MCP_SERVER": "false",
        "PHOENIX_LOG_MIGRATIONS": "false",
    }
    log = workdir / "phoenix.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [executable, "serve"], env=env, cwd=workdir, stdout=out, stderr=subprocess.STDOUT
        )
    return PhoenixServer(process, f"http://127.0.0.1:{port}", log)


_PHOENIX: dict[str, PhoenixServer] = {}


def _phoenix_executable() -> str | None:
    executable = os.environ.get(PHOENIX)
    return executable if executable and Path(executable).is_file() else None


@pytest.fixture(scope="session", autouse=True)
def _phoenix_started_early(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """Starts Phoenix at the first test of this package when a selected test needs it, so it
    warms up while the others run; stops it at the end of the session.

    Under pytest-xdist every worker collects every test and cannot know which one it will run,
    so a worker starts Phoenix only when a test asks for it (the other worker goes on meanwhile).
    """
    executable = _phoenix_executable()
    wanted = any(
        PHOENIX_FIXTURE in getattr(item, "fixturenames", ()) for item in request.session.items
    )
    if wanted and executable and "PYTEST_XDIST_WORKER" not in os.environ:
        _PHOENIX["server"] = _start_phoenix(executable, tmp_path_factory.mktemp("phoenix"))
    yield
    server = _PHOENIX.pop("server", None)
    if server is not None:
        server.stop()


@pytest.fixture(scope="session")
def phoenix_server(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The URL of the session's Phoenix, ready (its OTLP/HTTP endpoint is ``<url>/v1/traces``).
    Missing: the test skips, or fails when ``CI`` is set."""
    executable = _phoenix_executable()
    if "server" not in _PHOENIX and executable:
        _PHOENIX["server"] = _start_phoenix(executable, tmp_path_factory.mktemp("phoenix"))
    server = _PHOENIX.get("server")
    if server is None:
        message = f"Phoenix is not installed: set {PHOENIX} to arize-phoenix 20.x's `phoenix`"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    server.wait_until_ready(timeout=240)
    return server.url
