"""Fixtures: a clean environment, an own home and working directory per test, no network beyond
127.0.0.1, and real control-plane processes (``agent-saga cloud-server`` under uvicorn).

Starting a server process costs about 3 s of CPU (importing FastAPI and building the app), so
the processes are shared by the whole session where the tests allow it (under pytest-xdist, by
each worker's session: a worker starts a server when its first test needs it):

* ``server``: SQLite in its home; tests add only their own origins, tokens and approvals;
* ``replicas``: two processes on one real PostgreSQL schema;
* ``hostile``: SQLite, for the tests that throw bad input and every token at every endpoint
  (they halt the fleet and revoke tokens, so no agent of another test runs against it); short
  long-polls, a 256 KiB body limit and one allowed CORS origin.

The helpers are in ``plane_testkit`` (importable from here: this directory is put on
``sys.path``, as the test files are imported by path).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_saga.testing import loopback_only
from agent_saga.testing.postgres import scratch_schema, server_for_tests
from pytest_agent_saga import clean_environment

sys.path.insert(0, str(Path(__file__).resolve().parent))

from plane_testkit import (
    CONSOLE_ORIGIN,
    HOSTILE_BODY_LIMIT,
    RunningServer,
    cloud_server,
    cloud_servers,
)


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    clean_environment(monkeypatch, names=("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"))
    monkeypatch.setenv("AGENT_SAGA_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)  # anything a library writes by default lands here
    with loopback_only() as refused:
        yield
    assert refused == [], f"network access attempted: {refused}"


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """One SQLite-backed control plane for the session's agent tests."""
    with cloud_server(tmp_path_factory.mktemp("plane")) as running:
        yield running


@pytest.fixture(scope="session")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningServer, ...]]:
    """Two control-plane processes on one real PostgreSQL schema."""
    with server_for_tests() as url, scratch_schema(url) as schema:
        args = ("--store", url, "--store-schema", schema)
        homes = [(tmp_path_factory.mktemp(name), args) for name in ("one", "two")]
        with cloud_servers(*homes) as (one, two):  # started together, on an empty schema
            admin = one.admin or two.admin
            one.admin = two.admin = admin
            yield one, two


@pytest.fixture(scope="session")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """A control plane for bad input and the authorization matrix (see the module docstring)."""
    args = ("--max-wait", "0.05", "--max-body-bytes", str(HOSTILE_BODY_LIMIT))
    with cloud_server(
        tmp_path_factory.mktemp("hostile"), *args, "--cors-origin", CONSOLE_ORIGIN
    ) as running:
        yield running
