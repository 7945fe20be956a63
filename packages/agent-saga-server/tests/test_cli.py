"""``agent-saga cloud-server``: found through the ``agent_saga.commands`` entry point, its token
commands (straight to the store: SQLite in the home, or PostgreSQL from ``--store`` or fleet
mode's ``store`` setting), and one-line errors for a store it cannot use."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from agent_saga.cli import main
from agent_saga.testing.postgres import scratch_schema, server_for_tests
from click.testing import CliRunner
from plane_testkit import free_port


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def test_the_command_is_listed_by_agent_saga() -> None:
    code, output = run("--help")
    assert code == 0
    assert "cloud-server" in output
    code, output = run("cloud-server", "--help")
    assert code == 0
    assert "--store" in output
    assert "--max-body-bytes" in output


def test_tokens_are_created_listed_and_revoked_in_the_home(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    out = tmp_path / "agent.token"
    code, output = run(
        "--home", home, "cloud-server", "token", "create", "--scope", "agent",
        "--subject", "billing-bot", "--out", str(out),
    )  # fmt: skip
    assert code == 0, output
    token = out.read_text().strip()
    assert token.startswith("asg_")
    assert token not in output  # written, not printed
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    token_id, secret = token[4:20], token[21:]
    code, output = run("--home", home, "cloud-server", "token", "list")
    assert f"{token_id}  agent     billing-bot  billing-bot  active" in output
    assert (tmp_path / "home" / "control-plane.sqlite3").is_file()
    stored = (tmp_path / "home" / "control-plane.sqlite3").read_bytes()
    assert secret.encode() not in stored  # only a hash of the secret is kept
    assert run("--home", home, "cloud-server", "token", "revoke", token_id)[0] == 0
    code, output = run("--home", home, "cloud-server", "token", "list")
    assert f"{token_id}  agent     billing-bot  billing-bot  revoked" in output
    code, output = run("--home", home, "cloud-server", "token", "revoke", "0123456789abcdef")
    assert code == 1
    assert output.strip() == "Error: no token 0123456789abcdef"


def test_bad_token_requests_are_one_line_errors(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    code, output = run(
        "--home", home, "cloud-server", "token", "create", "--scope", "admin", "--subject", "a b"
    )
    assert code == 1
    assert output.count("\n") == 1
    assert output.startswith("Error: subject must match")
    code, output = run(
        "--home", home, "cloud-server", "token", "create", "--scope", "root", "--subject", "x"
    )
    assert code == 2
    assert "'root' is not one of" in output


def test_a_store_the_server_cannot_use_is_one_line(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    code, output = run("--home", home, "cloud-server", "--store", "mysql://db/x", "token", "list")
    assert code == 1
    assert (
        output
        == "Error: --store must be a postgresql:// URL or sqlite:///PATH, got 'mysql://db/x'\n"
    )
    url = f"postgresql://fleet:hunter2@127.0.0.1:{free_port()}/fleet"
    code, output = run("--home", home, "cloud-server", "--store", url, "token", "list")
    assert code == 1
    assert output.count("\n") == 1
    assert output.startswith("Error: postgresql://fleet:***@127.0.0.1:")
    assert "hunter2" not in output


def test_fleet_mode_store_setting_puts_the_tokens_in_postgresql(tmp_path: Path) -> None:
    with server_for_tests() as url, scratch_schema(url) as schema:
        (tmp_path / "agent-saga.toml").write_text(f'store = "{url}"\n')  # the working directory
        args = ("--home", str(tmp_path / "home"), "cloud-server", "--store-schema", schema)
        code, output = run(*args, "token", "create", "--scope", "auditor", "--subject", "ann")
        assert code == 0, output
        code, output = run(*args, "token", "list")
        assert "auditor   ann  -  active" in output
        assert not (tmp_path / "home" / "control-plane.sqlite3").exists()


def test_token_create_never_overwrites_a_file_nor_issues_a_token_it_cannot_write(
    tmp_path: Path,
) -> None:
    home = str(tmp_path / "home")
    create = ("--home", home, "cloud-server", "token", "create", "--scope", "agent", "--subject")
    kept = tmp_path / "agent.token"
    kept.write_text("asg_0123456789abcdef_in-use\n")
    code, output = run(*create, "billing-bot", "--out", str(kept))
    assert code == 1
    assert output == (
        f"Error: {kept} exists: it may hold a token still in use; remove it or choose "
        "another --out\n"
    )
    assert kept.read_text() == "asg_0123456789abcdef_in-use\n"
    nowhere = tmp_path / "missing" / "agent.token"
    code, output = run(*create, "billing-bot", "--out", str(nowhere))
    assert code == 1
    assert output == f"Error: cannot write {nowhere}: No such file or directory\n"
    code, output = run(*create, "a b", "--out", str(tmp_path / "new.token"))
    assert code == 1
    assert not (tmp_path / "new.token").exists()  # refused: no empty file left behind
    listed = CliRunner().invoke(main, ["--home", home, "cloud-server", "token", "list"])
    assert (listed.exit_code, listed.stdout, listed.stderr) == (0, "", "no tokens\n")  # none issued


def test_out_of_range_options_are_usage_errors(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    plane = ("cloud-server", "--store", "mysql://db/x")  # were a value taken: stop, not serve
    for args, message in [
        ((*plane, "--port", "99999"), "'--port': 99999 is not in the range 0<=x<=65535"),
        (("ui", "--port", "-1"), "'--port': -1 is not in the range 0<=x<=65535"),
        (
            ("ui", "--as", "ann smith", "--host", "127.0.0.999"),
            "Invalid value for '--as': must match",
        ),
        ((*plane, "--heartbeat", "0"), "'--heartbeat': 0.0 is not in the range"),
        ((*plane, "--heartbeat", "5"), "'--heartbeat': 5.0 is not in the range"),
        ((*plane, "--cors-origin", "console.example"), "'console.example' is not a browser origin"),
        (("cloud-server", "passkeys", "enrol", "a b"), "Invalid value for SUBJECT: must match"),
        (
            (
                "cloud-server",
                "token",
                "create",
                "--scope",
                "agent",
                "--subject",
                "bot",
                "--expires-in",
                "0",
            ),
            "'--expires-in': 0 is not in the range 1<=x<=315360000",
        ),  # an expired token, issued for nothing
    ]:
        result = CliRunner().invoke(main, ["--home", home, *args])
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output
    assert not (tmp_path / "home" / "control-plane.sqlite3").exists()
