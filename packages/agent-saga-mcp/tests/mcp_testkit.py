"""Test helpers: upstream MCP servers run as subprocesses (stdio commands, and HTTP servers on
127.0.0.1), effect ledgers outside every process, the package README's configuration adapted
to them, and a real ``mcp.ClientSession`` driving the gateway (a subprocess over stdio, or over
streamable HTTP).

Everything a test writes (homes, ledgers, configurations, the processes' stderr) is under its
own ``tmp_path`` (or a module's ``tmp_path_factory`` directory for shared servers).
"""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TextIO

import pytest
from agent_saga import Record, read_log
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

HERE = Path(__file__).resolve().parent
SERVER = HERE / "upstream_server.py"
PACKAGE_README = HERE.parent / "README.md"
PYTHON = sys.executable
BIN = Path(sys.executable).parent
AGENT_SAGA = shutil.which("agent-saga", path=str(BIN)) or "agent-saga"
START_TIMEOUT = 60.0
_TOML_BLOCK = re.compile(r"```toml\n(.*?)```", re.DOTALL)


class Ledger:
    """The effects an upstream server made, one JSON object per line."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def entries(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line]

    def ops(self, op: str) -> list[dict[str, Any]]:
        return [entry for entry in self.entries() if entry["op"] == op]


@dataclass
class HttpUpstream:
    """An upstream server process serving streamable HTTP on 127.0.0.1."""

    url: str
    process: subprocess.Popen[str]
    ledger: Ledger

    def stop(self) -> None:
        stop_process(self.process)


def read_line(stream: IO[str], timeout: float, what: str) -> str:
    """One line from a subprocess pipe, or a test failure after ``timeout`` seconds."""
    ready, _, _ = select.select([stream], [], [], timeout)
    if not ready:
        pytest.fail(f"{what} said nothing within {timeout} s")
    return str(stream.readline())


def stop_process(process: subprocess.Popen[str], sig: int = signal.SIGTERM) -> int:
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()
    return process.returncode


def start_http_upstream(kind: str, ledger: Path, errlog: Path) -> HttpUpstream:
    with errlog.open("w") as err:
        process = subprocess.Popen(
            [PYTHON, str(SERVER), kind, "--ledger", str(ledger), "--http"],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    assert process.stdout is not None
    line = read_line(process.stdout, START_TIMEOUT, f"the {kind} server")
    if not line.startswith("PORT "):
        stop_process(process)
        pytest.fail(f"the {kind} server did not start: {line!r} {errlog.read_text()[-2000:]}")
    return HttpUpstream(f"http://127.0.0.1:{int(line.split()[1])}/mcp", process, Ledger(ledger))


def stdio_upstream(kind: str, ledger: Path, *extra: str) -> str:
    """The TOML lines that start upstream ``kind`` as a stdio command."""
    args = [str(SERVER), kind, "--ledger", str(ledger), *extra]
    return f"command = {json.dumps(PYTHON)}\nargs = {json.dumps(args)}"


def readme_config(payments_url: str, issues_ledger: Path, extra: str = "") -> str:
    """The package README's gateway.toml, pointed at the test servers, plus ``extra`` tables."""
    text = str(_TOML_BLOCK.findall(PACKAGE_README.read_text())[0])
    text = text.replace('command = "issues-mcp-server"', stdio_upstream("issues", issues_ledger))
    text = text.replace('url = "http://127.0.0.1:9000/mcp"', f"url = {json.dumps(payments_url)}")
    return text + extra


def issues_only(config: str) -> str:
    """The README's configuration without its payments upstream (not started here)."""
    kept: list[str] = []
    skipping = False
    for line in config.splitlines():
        if line.startswith("["):
            skipping = "upstreams.payments" in line
        if not skipping:
            kept.append(line)
    return "\n".join(kept) + "\n"


TEST_DECLARATIONS = """
[upstreams.payments.tools.fail]
semantics = "reversible"

[upstreams.payments.tools.crash]
semantics = "reversible"

[upstreams.payments.tools.find_charge]
semantics = "reversible"
"""
"""What the tests add to the README's configuration: tools that fail on purpose (an error
result, and a protocol error)."""


def saga_records(home: Path) -> dict[str, list[Record]]:
    """The home's log, by saga."""
    out: dict[str, list[Record]] = {}
    for record in read_log(home):
        if record.saga is not None:
            out.setdefault(record.saga, []).append(record)
    return out


def saga_end(records: list[Record]) -> dict[str, Any] | None:
    ends = [r.data for r in records if r.kind == "saga.end"]
    return dict(ends[-1]) if ends else None


def run_cli(
    home: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``agent-saga --home HOME ARGS`` as a user would run it."""
    return subprocess.run(
        [AGENT_SAGA, "--home", str(home), "--no-color", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **(env or {})},
    )


@asynccontextmanager
async def stdio_gateway(
    home: Path, config: Path, errlog: TextIO, **session: Any
) -> AsyncIterator[ClientSession]:
    """A client session with ``agent-saga mcp serve`` started as a stdio subprocess."""
    params = StdioServerParameters(
        command=AGENT_SAGA, args=["--home", str(home), "mcp", "serve", "--config", str(config)]
    )
    async with (
        stdio_client(params, errlog=errlog) as (read, write),
        ClientSession(read, write, **session) as client,
    ):
        await client.initialize()
        yield client


@asynccontextmanager
async def http_gateway(url: str, **session: Any) -> AsyncIterator[ClientSession]:
    """A client session with a gateway serving streamable HTTP; closing it sends the DELETE."""
    async with (
        streamable_http_client(url) as (read, write),
        ClientSession(read, write, **session) as client,
    ):
        await client.initialize()
        yield client


def text_of(result: Any) -> str:
    return " ".join(block.text for block in result.content if hasattr(block, "text"))


def wait_for_text(path: Path, pattern: str, process: subprocess.Popen[str], timeout: float) -> str:
    """The first match of ``pattern`` in the file ``path`` a process writes, as it appears."""
    deadline = time.monotonic() + timeout
    regex = re.compile(pattern)
    while time.monotonic() < deadline:
        text = path.read_text() if path.exists() else ""
        match = regex.search(text)
        if match:
            return match.group(1)
        if process.poll() is not None:
            pytest.fail(f"the process exited ({process.returncode}): {text[-3000:]}")
        time.sleep(0.05)
    pytest.fail(f"{pattern!r} did not appear in {path} within {timeout} s")


def this_user() -> str:
    """The approver id ``agent-saga approve`` votes as, for the user running the tests."""
    return "unix:" + pwd.getpwuid(os.geteuid()).pw_name


def step_sagas(home: Path, tool: str, **args: Any) -> list[str]:
    """Ids of the sagas with a step of ``tool`` whose arguments include ``args``."""
    found = []
    for saga, records in saga_records(home).items():
        for record in records:
            data = record.data
            given = data.get("args")
            if record.kind != "step.intent" or data.get("tool") != tool:
                continue
            if isinstance(given, dict) and all(given.get(k) == v for k, v in args.items()):
                found.append(saga)
    return found


async def eventually(check: Callable[[], Any], timeout: float = 20.0) -> Any:
    """Poll ``check`` until it returns something true; that value (or a test failure)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        await asyncio.sleep(0.05)
    pytest.fail(f"{check} was still false after {timeout} s")
