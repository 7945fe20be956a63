"""The READMEs' examples, run against a real server process.

* The root README's "A fleet: the control plane": its first command is how the session's
  ``server`` was started (with ``--port 0`` and the test's home); the token command and the
  agent command run as written (in this process: the ``agent-saga`` command through click, the
  agent script through ``runpy``), with the server's real URL for ``127.0.0.1:8000``.
* The package README: its Python blocks run in order and print what the text blocks after them
  say (``SERVER`` and the ``*_TOKEN`` names are given to them); its token commands run against
  the server's store; its option table is the command's options, and its API table is the
  OpenAPI document's operations with the scopes of the authorization matrix. The ``pip
  install`` lines are not run (no registry is reached), nor is the deployment line (its host
  and database are the reader's): the replicas fixture starts servers with the same options.
"""

from __future__ import annotations

import contextlib
import io
import re
import runpy
import shlex
import threading
import time
from pathlib import Path

import httpx
import pytest
from agent_saga import IRREVERSIBLE, AgentKit
from agent_saga.cli import main
from click.testing import CliRunner
from matrix import ALLOWED, PUBLIC
from plane_testkit import RunningServer

PACKAGE_README = Path(__file__).resolve().parents[1] / "README.md"
ROOT_README = Path(__file__).resolve().parents[3] / "README.md"
BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.DOTALL)


def section(text: str, title: str) -> str:
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else None]


def blocks(text: str, lang: str) -> list[str]:
    return [body for kind, body in BLOCK.findall(text) if kind == lang]


AGENT = """
from agent_saga import AgentKit

kit = AgentKit()  # the server and its token come from the environment


@kit.tool(name="invoices.send", compensate=lambda invoice: None)
def send(invoice: str) -> str:
    return invoice


with kit.transaction("month-end"):
    send("inv-7")
kit.close()
"""


def test_the_root_readme_starts_a_server_and_points_an_agent_at_it(
    server: RunningServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fleet = section(ROOT_README.read_text(), "A fleet: the control plane")
    start, make_token = blocks(fleet, "sh")[0].strip().splitlines()
    [point] = blocks(fleet, "sh")[1].strip().splitlines()
    assert start == "uv run agent-saga cloud-server"  # how `server` was started
    assert server.printed_admin
    assert (server.home / "control-plane.sqlite3").is_file()  # SQLite in the home
    words = shlex.split(make_token)
    assert words[:3] == ["uv", "run", "agent-saga"]
    monkeypatch.setenv("AGENT_SAGA_HOME", str(server.home))
    made = CliRunner().invoke(main, words[3:])  # the agent-saga command, in this process
    assert made.exit_code == 0, made.output
    assert (tmp_path / "agent.token").read_text().startswith("asg_")
    *assignments, uv, run, python, script = shlex.split(point)
    assert [uv, run, python, script] == ["uv", "run", "python", "agent.py"]
    settings = dict(a.split("=", 1) for a in assignments)
    assert settings["AGENT_SAGA_SERVER"] == "http://127.0.0.1:8000"
    settings["AGENT_SAGA_SERVER"] = server.url
    for name, value in {**settings, "AGENT_SAGA_HOME": str(tmp_path / "agent")}.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "agent.py").write_text(AGENT)
    runpy.run_path(script, run_name="__main__")  # python agent.py, in this process
    with server.client(server.admin) as admin:
        listed = admin.get("/v1/sagas", params={"origin": "billing-bot"}).json()["sagas"]
    assert [(saga["name"], saga["status"], saga["tools"]) for saga in listed] == [
        ("month-end", "committed", ["invoices.send"])
    ]


def run_python_blocks(text: str, namespace: dict[str, object], before: dict[int, object]) -> None:
    """Run each Python block of ``text`` in ``namespace``; compare what it prints with the text
    block after it. ``before[i]`` is called before block ``i`` runs."""
    found = BLOCK.findall(text)
    index = 0
    for position, (kind, body) in enumerate(found):
        if kind != "python":
            continue
        hook = before.get(index)
        if callable(hook):
            hook()
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(body, str(PACKAGE_README), "exec"), namespace)
        following = found[position + 1] if position + 1 < len(found) else None
        if following is not None and following[0] == "text":
            assert printed.getvalue() == following[1], body
        index += 1
    assert index == 3


def test_the_package_readme_examples_run(server: RunningServer, tmp_path: Path) -> None:
    assert server.admin is not None
    namespace: dict[str, object] = {
        "__name__": "readme",
        "SERVER": server.url,
        "AGENT_HOME": tmp_path / "readme-agent",
        "AGENT_TOKEN": server.token("agent", "readme-agent"),
        "APPROVER_TOKEN": server.token("approver", "readme-approver"),
        "ADMIN_TOKEN": server.admin,
    }
    waiting = AgentKit(
        home=tmp_path / "payer", server=server.url, token=server.token("agent", "readme-payer")
    )
    paid: list[str] = []

    @waiting.tool(name="bank.wire", semantics=IRREVERSIBLE)
    def wire(to: str, amount: int) -> str:
        paid.append(f"{amount} to {to}")
        return paid[-1]

    def pay() -> None:
        with waiting.transaction("payout"):
            wire(to="acme", amount=9000)

    payer = threading.Thread(target=pay)

    def a_request_is_pending() -> None:
        payer.start()
        with httpx.Client(base_url=server.url, trust_env=False) as client:
            headers = {"Authorization": f"Bearer {server.admin}"}
            deadline = time.monotonic() + 20
            while not client.get(
                "/v1/approvals", params={"status": "pending"}, headers=headers
            ).json()["approvals"]:
                assert time.monotonic() < deadline
                time.sleep(0.02)

    try:
        run_python_blocks(PACKAGE_README.read_text(), namespace, {1: a_request_is_pending})
        payer.join(20)
        assert paid == ["9000 to acme"]
    finally:
        waiting.close()


def test_the_package_readme_token_commands_run(server: RunningServer, tmp_path: Path) -> None:
    text = section(PACKAGE_README.read_text(), "Starting it")
    start, tokens = blocks(text, "sh")
    assert start.strip() == "agent-saga cloud-server"  # how `server` was started
    home = ["--home", str(server.home)]
    created = ""
    for line in tokens.strip().splitlines():
        words = shlex.split(line)
        assert words[:2] == ["agent-saga", "cloud-server"]
        if words[-2] == "revoke":
            words[-1] = created
        result = CliRunner().invoke(main, [*home, *words[1:]])
        assert result.exit_code == 0, result.output
        if "create" in words:
            created = (tmp_path / "agent.token").read_text()[4:20]
        elif "list" in words:
            assert f"{created}  agent     billing-bot" in result.output
        else:
            assert result.output == f"revoked {created}\n"


def test_the_package_readme_tables_are_the_command_and_the_api(server: RunningServer) -> None:
    text = PACKAGE_README.read_text()
    first_column = re.findall(r"^\| (`--[^|]+) \|", section(text, "Starting it"), re.MULTILINE)
    options = {option for cell in first_column for option in re.findall(r"--[a-z-]+", cell)}
    help_text = CliRunner().invoke(main, ["cloud-server", "--help"]).output
    offered = set(re.findall(r"^\s+(--[a-z-]+)", help_text, re.MULTILINE)) - {"--help"}
    assert options == offered
    rows = re.findall(
        r"^\| (GET|POST|PUT|DELETE) \| `([^`]+)` \| ([^|]+) \|", section(text, "The API"), re.M
    )
    table = {
        (method, path): frozenset(s.strip() for s in scopes.split(","))
        for method, path, scopes in rows
    }
    expected = {key: ({"none"} if value == PUBLIC else value) for key, value in ALLOWED.items()}
    assert table == expected
    with server.client() as client:
        paths = client.get("/openapi.json").json()["paths"]
    assert {(m.upper(), p) for p, item in paths.items() for m in item} == set(table)
