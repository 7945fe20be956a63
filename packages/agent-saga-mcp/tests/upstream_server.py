"""Upstream MCP servers for the tests, written with the mcp SDK's MCPServer.

``python upstream_server.py KIND --ledger FILE [--root DIR] [--http]`` serves one of:

* ``issues``: an issue tracker (create_issue, close_issue, list_issues, add_label, delete_repo);
* ``payments``: a payment provider (charge, slow_charge, refund, find_charge, fail, crash);
* ``files``: a stand-in for the reference filesystem server (@modelcontextprotocol/
  server-filesystem): the same tool names and argument names, on ``--root``;
* ``probe``: tools that exercise the gateway's relay (echo, wait until cancelled, exit mid-call).

Every effect is appended to the ledger file as one JSON line (one ``write`` on an ``O_APPEND``
descriptor), outside the process, so a test counts effects across gateway crashes and server
restarts. Issue numbers and charge ids continue from the ledger. Over ``--http`` the server
binds 127.0.0.1 on a free port and prints ``PORT <n>`` on stdout once it listens.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import sys
from pathlib import Path
from typing import Any, TypedDict

import anyio
import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError


class Ledger:
    def __init__(self, path: Path) -> None:
        self.path = path

    def record(self, op: str, **fields: Any) -> None:
        line = json.dumps({"op": op, "pid": os.getpid(), **fields}, sort_keys=True) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    def entries(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line]


class Issue(TypedDict):
    number: int
    title: str


class Closed(TypedDict):
    number: int
    state: str


class Charge(TypedDict):
    charge_id: str
    amount: float


class Refund(TypedDict):
    refund_id: str
    charge_id: str


def issues(ledger: Ledger) -> MCPServer:
    app = MCPServer("issues")

    @app.tool()
    def create_issue(title: str, body: str = "") -> Issue:
        """Open an issue; returns its number."""
        number = 1 + sum(1 for e in ledger.entries() if e["op"] == "create_issue")
        ledger.record("create_issue", number=number, title=title)
        return {"number": number, "title": title}

    @app.tool()
    def close_issue(number: int) -> Closed:
        """Close an issue."""
        ledger.record("close_issue", number=number)
        return {"number": number, "state": "closed"}

    @app.tool()
    def list_issues() -> list[int]:
        """Numbers of the open issues."""
        entries = ledger.entries()
        closed = {e["number"] for e in entries if e["op"] == "close_issue"}
        created = [e["number"] for e in entries if e["op"] == "create_issue"]
        return [number for number in created if number not in closed]

    @app.tool()
    def add_label(number: int, label: str) -> str:
        """Label an issue (declared nowhere: IRREVERSIBLE behind the gateway)."""
        ledger.record("add_label", number=number, label=label)
        return f"labelled #{number} {label}"

    @app.tool()
    def delete_repo(confirm: bool) -> str:
        """Delete the repository (the gateway hides it)."""
        ledger.record("delete_repo")
        return "deleted"

    return app


def payments(ledger: Ledger) -> MCPServer:
    app = MCPServer("payments")

    def make_charge(amount: float, card: str, idempotency_key: str) -> Charge:
        number = 1 + sum(1 for e in ledger.entries() if e["op"] == "charge")
        charge_id = f"ch_{number}"
        ledger.record("charge", charge_id=charge_id, amount=amount, card=card, key=idempotency_key)
        return {"charge_id": charge_id, "amount": amount}

    @app.tool()
    def charge(amount: float, card: str, idempotency_key: str = "") -> Charge:
        """Charge a card."""
        return make_charge(amount, card, idempotency_key)

    @app.tool()
    async def slow_charge(amount: float, card: str, idempotency_key: str = "") -> Charge:
        """Charge a card, then take a long time to answer (on the event loop: a stop cancels it)."""
        made = make_charge(amount, card, idempotency_key)
        await anyio.sleep(60)
        return made

    @app.tool()
    def refund(charge_id: str, idempotency_key: str = "") -> Refund:
        """Refund a charge."""
        ledger.record("refund", charge_id=charge_id, key=idempotency_key)
        return {"refund_id": f"re_{charge_id}", "charge_id": charge_id}

    @app.tool()
    def find_charge(idempotency_key: str) -> dict[str, Any]:
        """The charge made with this key, if any (a plain dict: no output schema)."""
        for entry in ledger.entries():
            if entry["op"] == "charge" and entry["key"] == idempotency_key:
                return {"found": True, "charge": {"charge_id": entry["charge_id"]}}
        return {"found": False, "charge": None}

    @app.tool()
    def fail(reason: str) -> str:
        """Always fails."""
        ledger.record("fail", reason=reason)
        raise ToolError(f"declined: {reason}")

    @app.tool()
    def crash(reason: str) -> str:
        """Answers with a protocol error instead of a result."""
        raise MCPError(code=-32603, message=f"provider crashed: {reason}")

    return app


def files(ledger: Ledger, root: Path) -> MCPServer:
    app = MCPServer("secure-filesystem-server")

    def inside(path: str) -> Path:
        resolved = (root / path).resolve() if not Path(path).is_absolute() else Path(path).resolve()
        if resolved != root and root not in resolved.parents:
            raise ToolError(f"Access denied - path outside allowed directories: {path}")
        return resolved

    @app.tool()
    def read_text_file(path: str, head: int | None = None, tail: int | None = None) -> str:
        """Read a file as text."""
        return inside(path).read_text()

    @app.tool()
    def write_file(path: str, content: str) -> str:
        """Create or overwrite a file."""
        inside(path).write_text(content)
        ledger.record("write_file", path=path)
        return f"Successfully wrote to {path}"

    @app.tool()
    def create_directory(path: str) -> str:
        """Create a directory."""
        inside(path).mkdir(parents=True, exist_ok=True)
        ledger.record("create_directory", path=path)
        return f"Successfully created directory {path}"

    @app.tool()
    def list_directory(path: str) -> str:
        """List a directory."""
        entries = sorted(inside(path).iterdir())
        return "\n".join(("[DIR] " if e.is_dir() else "[FILE] ") + e.name for e in entries)

    @app.tool()
    def move_file(source: str, destination: str) -> str:
        """Move or rename a file."""
        target = inside(destination)
        if target.exists():
            raise ToolError(f"Destination already exists: {destination}")
        shutil.move(inside(source), target)
        ledger.record("move_file", source=source, destination=destination)
        return f"Successfully moved {source} to {destination}"

    @app.tool()
    def get_file_info(path: str) -> str:
        """Size and times of a file."""
        return f"size: {inside(path).stat().st_size}"

    @app.tool()
    def list_allowed_directories() -> str:
        """The directories this server may touch."""
        return f"Allowed directories:\n{root}"

    return app


def probe(ledger: Ledger) -> MCPServer:
    app = MCPServer("probe")

    @app.tool()
    def echo(text: str) -> str:
        """Say ``text`` back."""
        ledger.record("echo", text=text)
        return text

    @app.tool()
    async def wait(seconds: float, label: str) -> str:
        """Wait, then answer; a cancelled wait is recorded as such."""
        ledger.record("wait_started", label=label)
        try:
            await anyio.sleep(seconds)
        except anyio.get_cancelled_exc_class():
            ledger.record("wait_cancelled", label=label)
            raise
        ledger.record("wait_done", label=label)
        return f"waited {label}"

    @app.tool()
    def keep(value: Any = None) -> str:
        """Record ``value`` as received (any JSON value), and say it back."""
        ledger.record("keep", value=value)
        return repr(value)

    @app.tool()
    def die() -> str:
        """Exit the process in the middle of the call."""
        ledger.record("die")
        os._exit(3)

    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=["issues", "payments", "files", "probe"])
    parser.add_argument("--ledger", type=Path, required=True)
    parser.add_argument("--root", type=Path)
    parser.add_argument("--http", action="store_true")
    args = parser.parse_args()
    ledger = Ledger(args.ledger)
    if args.kind == "files":
        app = files(ledger, args.root.resolve())
    elif args.kind == "probe":
        app = probe(ledger)
    else:
        app = issues(ledger) if args.kind == "issues" else payments(ledger)
    if not args.http:
        app.run()
        return
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(
        app.streamable_http_app(), log_level="warning", timeout_graceful_shutdown=1
    )
    server = uvicorn.Server(config)
    anyio.run(lambda: server.serve(sockets=[sock]))
    sys.exit(0)


if __name__ == "__main__":
    main()
