"""The READMEs' examples, run.

* The root README's "Any MCP client" configuration runs against a stand-in for the reference
  filesystem server (same tool and argument names; the real one is an npm package this test
  does not fetch): a move is undone when a later call fails; a write (IRREVERSIBLE) is refused
  when the client cannot be asked, and runs once its user approves through elicitation. The
  client configuration's two lines are the command this test starts.
* The package README's configuration is the one the stdio, HTTP and recovery tests run; here its
  example error message is checked against the line the gateway reports.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from pathlib import Path

import pytest
from agent_saga import read_log
from agent_saga_mcp._toml_lines import TomlLines
from mcp import types
from mcp.client.session import ClientRequestContext
from mcp_testkit import (
    AGENT_SAGA,
    PACKAGE_README,
    Ledger,
    issues_only,
    readme_config,
    saga_end,
    saga_records,
    stdio_gateway,
    stdio_upstream,
    text_of,
)

ROOT_README = Path(__file__).resolve().parents[3] / "README.md"


def _section(text: str, title: str) -> str:
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else None]


def _blocks(text: str, lang: str) -> list[str]:
    return [str(block) for block in re.findall(rf"```{lang}\n(.*?)```", text, re.DOTALL)]


def test_the_root_readme_shows_a_config_and_the_two_client_lines() -> None:
    section = _section(ROOT_README.read_text(), "Any MCP client")
    [client] = _blocks(section, "json")
    server = json.loads(client)["mcpServers"]["notes"]
    assert server["command"] == "agent-saga"
    assert server["args"][:3] == ["mcp", "serve", "--config"]
    [config] = _blocks(section, "toml")
    assert "@modelcontextprotocol/server-filesystem" in config


def _files_config(root: Path, ledger: Path) -> str:
    [config] = _blocks(_section(ROOT_README.read_text(), "Any MCP client"), "toml")
    original = (
        'command = "npx"\n'
        'args = ["-y", "@modelcontextprotocol/server-filesystem", "/home/me/notes"]'
    )
    assert original in config
    return config.replace(original, stdio_upstream("files", ledger, "--root", str(root)))


def test_the_root_readme_config_undoes_a_move_and_asks_before_a_write(tmp_path: Path) -> None:
    notes, ledger = tmp_path / "notes", Ledger(tmp_path / "files.jsonl")
    notes.mkdir()
    (notes / "draft.md").write_text("draft")
    (notes / "todo.md").write_text("todo")
    (notes / "done.md").write_text("done")
    config = tmp_path / "gateway.toml"
    config.write_text(_files_config(notes, ledger.path))
    home = tmp_path / "home"
    asked: list[str] = []

    async def approve(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": True})

    async def run() -> dict[str, types.CallToolResult]:
        out: dict[str, types.CallToolResult] = {}
        with (tmp_path / "gateway.err").open("w") as err:
            async with stdio_gateway(home, config, err) as client:  # no elicitation
                out["list"] = await client.call_tool("list_directory", {"path": str(notes)})
                out["move"] = await client.call_tool(
                    "move_file", {"source": "draft.md", "destination": "final.md"}
                )
                out["write"] = await client.call_tool(
                    "write_file", {"path": "new.md", "content": "x"}
                )
                out["clash"] = await client.call_tool(
                    "move_file", {"source": "todo.md", "destination": "done.md"}
                )
            async with stdio_gateway(home, config, err, elicitation_callback=approve) as client:
                out["approved"] = await client.call_tool(
                    "write_file", {"path": "new.md", "content": "approved"}
                )
        return out

    out = asyncio.run(run())
    assert "[FILE] draft.md" in text_of(out["list"])
    assert not out["move"].is_error
    assert out["write"].is_error
    assert "the client does not support elicitation" in _denial_note(home)
    assert out["clash"].is_error
    assert "compensated #2 move_file" in text_of(out["clash"])
    assert (notes / "draft.md").read_text() == "draft"  # moved back
    assert not (notes / "final.md").exists()
    assert [(e["source"], e["destination"]) for e in ledger.ops("move_file")] == [
        ("draft.md", "final.md"),
        ("final.md", "draft.md"),
    ]
    assert not out["approved"].is_error, text_of(out["approved"])
    assert (notes / "new.md").read_text() == "approved"
    assert [e["path"] for e in ledger.ops("write_file")] == ["new.md"]
    assert len(asked) == 1
    assert "Approve write_file (irreversible)?" in asked[0]
    statuses = sorted(str((saga_end(rs) or {}).get("status")) for rs in saga_records(home).values())
    assert statuses == ["committed", "rolled_back"]


def _denial_note(home: Path) -> str:
    votes = [r.data for r in read_log(home) if r.kind == "approval.vote"]
    notes = [str(v["note"]) for v in votes if v["decision"] == "deny"]
    return notes[0] if notes else ""


def test_the_package_readme_error_example_names_the_line_the_gateway_reports(
    tmp_path: Path,
) -> None:
    text = PACKAGE_README.read_text()
    example = re.search(
        r"`gateway\.toml:(\d+): (upstreams\.issues\.tools\.create_isue: [^(]+)", text
    )
    assert example is not None
    readme_line, message = int(example.group(1)), example.group(2).strip()
    [block] = _blocks(text, "toml")
    typo = block.replace("tools.create_issue]", "tools.create_isue]")
    assert TomlLines(typo).line_of(("upstreams", "issues", "tools", "create_isue")) == readme_line

    config = tmp_path / "gateway.toml"
    ledger = tmp_path / "issues.jsonl"
    adapted = readme_config("http://127.0.0.1:9/unused", ledger)
    adapted = adapted.replace("tools.create_issue]", "tools.create_isue]")
    config.write_text(issues_only(adapted))
    expected_line = TomlLines(config.read_text()).line_of(
        ("upstreams", "issues", "tools", "create_isue")
    )
    result = serve_from_dev_null(tmp_path / "home", config)
    assert result.returncode == 1
    assert f"{config}:{expected_line}: {message} (add_label, close_issue" in result.stderr
    assert not (tmp_path / "home" / "log.jsonl").exists()  # nothing ran


def test_check_lists_what_the_readme_configuration_exposes(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    adapted = readme_config("http://127.0.0.1:9/unused", tmp_path / "issues.jsonl")
    config.write_text(issues_only(adapted))
    result = subprocess.run(
        [AGENT_SAGA, "--home", str(tmp_path / "home"), "mcp", "check", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines()[1:-1]}
    assert rows["create_issue"] == ["issues/create_issue", "compensable", "close_issue"]
    assert rows["list_issues"] == ["issues/list_issues", "reversible", "-"]
    assert rows["add_label"] == ["issues/add_label", "irreversible", "-"]
    assert "delete_repo" not in rows
    assert result.stdout.splitlines()[-1] == (
        "4 tool(s) exposed, 1 hidden; the configuration is valid."
    )
    assert not (tmp_path / "home").exists()  # check writes nothing


@pytest.mark.parametrize("command", ["serve", "check"])
def test_the_package_readme_commands_exist(command: str) -> None:
    result = subprocess.run(
        [AGENT_SAGA, "mcp", command, "--help"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "--config" in result.stdout
    assert f"agent-saga mcp {command} --config gateway.toml" in PACKAGE_README.read_text()


def serve_from_dev_null(home: Path, config: Path) -> subprocess.CompletedProcess[str]:
    """``agent-saga mcp serve --config CONFIG`` with no client: stdin from ``/dev/null``."""
    return subprocess.run(
        [AGENT_SAGA, "--home", str(home), "mcp", "serve", "--config", str(config)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_serve_with_stdin_from_dev_null_ends_cleanly(tmp_path: Path) -> None:
    """A client that is no pipe (stdin from ``/dev/null``, as a service manager may start it):
    the gateway reads the end of its input and exits, without a traceback or a hang."""
    config = tmp_path / "gateway.toml"
    adapted = readme_config("http://127.0.0.1:9/unused", tmp_path / "issues.jsonl")
    config.write_text(issues_only(adapted))
    result = serve_from_dev_null(tmp_path / "home", config)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
