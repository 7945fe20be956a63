"""A keyed chain (``AgentKit(chain_key=...)``) and the command line.

Every command that reads or writes the log gets the key from a key file named by
``--chain-key-file``, ``$AGENT_SAGA_CHAIN_KEY_FILE`` or ``chain_key_file`` in the configuration
(never the secret itself on the command line). Without it, or with another key, the command
fails with one line that says the key is missing or does not match.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from agent_saga import AgentKit, SagaRolledBack, SequentialIds, compensator, tool
from agent_saga.cli import main
from click.testing import CliRunner, Result

REFUNDS: list[str] = []


@compensator("keyed.refund")
def _refund(result: str) -> None:
    REFUNDS.append(result)


@tool(name="keyed.charge", semantics="compensable", compensate="keyed.refund")
def charge(cents: int) -> str:
    return f"ch_{cents}"


def write_key(path: Path, text: str | None = None) -> str:
    """A key file as an operator makes one: 64 hex digits and a newline, mode 0600."""
    text = secrets.token_hex(32) if text is None else text
    path.write_text(text + "\n")
    path.chmod(0o600)
    return text


@pytest.fixture
def keyed(home: Path, tmp_path: Path) -> tuple[Path, list[str]]:
    """A home whose log is keyed with the key in ``key``; returns the key file and saga ids."""
    key_file = tmp_path / "chain.key"
    key = write_key(key_file).encode()
    ids: list[str] = []
    with AgentKit(home=home, chain_key=key, ids=SequentialIds("keyed")) as kit:
        with kit.transaction("paid") as saga:
            charge(100)
        ids.append(saga.id)
        with pytest.raises(SagaRolledBack) as rolled, kit.transaction("declined"):
            charge(200)
            raise RuntimeError("card declined")
        ids.append(rolled.value.saga_id)
    return key_file, ids


def run(home: Path, *args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, ["--home", str(home), *args], env=env)


def assert_one_line_error(result: Result, code: int) -> str:
    assert result.exit_code == code, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ")
    assert "Traceback" not in result.output
    return lines[0]


COMMANDS = {
    "verify": ["verify"],
    "certify": ["certify"],
    "sagas": ["sagas"],
    "replay": ["replay", "keyed-0001"],
    "prove": ["prove", "keyed-0002", "-o", "{tmp}/bundle.json"],
    "checkpoint": ["checkpoint"],
    "status": ["status"],
    "guarantees": ["guarantees", "--json"],
    "recover": ["recover"],
    "approvals": ["approvals"],
}
SOURCES = ["option", "environment", "configuration"]


def command_args(name: str, tmp_path: Path) -> list[str]:
    return [arg.replace("{tmp}", str(tmp_path)) for arg in COMMANDS[name]]


def invoke_with_key(
    home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    key_file: Path,
    source: str,
    args: list[str],
) -> Result:
    if source == "option":
        return run(home, "--chain-key-file", str(key_file), *args)
    if source == "environment":
        return run(home, *args, env={"AGENT_SAGA_CHAIN_KEY_FILE": str(key_file)})
    project = tmp_path / "project"
    project.mkdir()
    (project / "agent-saga.toml").write_text(f'chain_key_file = "{key_file.name}"\n')
    key_file.rename(project / key_file.name)
    monkeypatch.chdir(project)
    return run(home, *args)


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_reads_a_keyed_log_with_the_key(
    keyed: tuple[Path, list[str]],
    home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    source: str,
) -> None:
    key_file, ids = keyed
    args = command_args(name, tmp_path)
    result = invoke_with_key(home, tmp_path, monkeypatch, key_file, source, args)
    assert result.exit_code == 0, result.output
    if name == "verify":
        assert "log intact" in result.stdout
        assert "consistent with the latest checkpoint" in result.stdout
    elif name == "certify":
        assert "certified: 2 sagas" in result.stdout
    elif name == "sagas":
        assert ids[0] in result.stdout
        assert ids[1] in result.stdout
    elif name == "replay":
        assert "final status  committed" in result.stdout
    elif name == "prove":
        bundle = json.loads((tmp_path / "bundle.json").read_text())
        assert bundle["saga"] == ids[1]
    elif name == "status":
        assert "ready" in result.stdout
    elif name == "guarantees":
        assert json.loads(result.stdout)["store"]["keyed_chain"] is True
    elif name == "recover":
        assert result.stdout.strip() == "nothing to recover"
    elif name == "approvals":
        assert result.stdout.strip() == "no pending approvals"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_without_the_key_each_command_says_the_log_may_be_keyed(
    keyed: tuple[Path, list[str]], home: Path, tmp_path: Path, name: str
) -> None:
    line = assert_one_line_error(run(home, *command_args(name, tmp_path)), 1)
    assert "chain key" in line
    assert "--chain-key-file" in line
    assert "offset 0" not in line


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_wrong_key_is_one_line_that_says_it_does_not_match(
    keyed: tuple[Path, list[str]], home: Path, tmp_path: Path, name: str
) -> None:
    wrong = tmp_path / "wrong.key"
    write_key(wrong)
    args = command_args(name, tmp_path)
    line = assert_one_line_error(run(home, "--chain-key-file", str(wrong), *args), 1)
    assert "does not match" in line
    assert str(wrong) in line
    assert "offset 0" not in line


def test_a_key_given_for_an_unkeyed_log_is_named_as_such(home: Path, tmp_path: Path) -> None:
    with AgentKit(home=home) as kit, kit.transaction("plain"):
        charge(1)
    key_file = tmp_path / "chain.key"
    write_key(key_file)
    line = assert_one_line_error(run(home, "--chain-key-file", str(key_file), "verify"), 1)
    assert "not keyed" in line


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "cannot read"),
        ("", "empty"),
        ("short", "at least 16"),
        (b"\xff" * 40, "UTF-8"),
        ("open to others, but long enough", "chmod 600"),
    ],
    ids=["missing", "empty", "short", "binary", "readable-by-others"],
)
def test_an_unusable_key_file_is_one_line(
    keyed: tuple[Path, list[str]],
    home: Path,
    tmp_path: Path,
    content: str | bytes | None,
    problem: str,
) -> None:
    bad = tmp_path / "bad.key"
    if isinstance(content, bytes):
        bad.write_bytes(content)
    elif content is not None:
        bad.write_text(content)
    if bad.exists():
        bad.chmod(0o644 if problem == "chmod 600" else 0o600)
    line = assert_one_line_error(run(home, "--chain-key-file", str(bad), "sagas"), 1)
    assert problem in line
    assert str(bad) in line


def test_the_key_is_never_taken_from_the_command_line_itself(
    keyed: tuple[Path, list[str]], home: Path
) -> None:
    result = run(home, "--chain-key", "0123456789abcdef0123456789abcdef", "sagas")
    assert result.exit_code == 2
    assert "No such option" in result.output


def test_the_sdk_reads_the_same_configured_key_file(
    keyed: tuple[Path, list[str]], home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key_file, _ = keyed
    monkeypatch.setenv("AGENT_SAGA_CHAIN_KEY_FILE", str(key_file))
    with AgentKit(home=home) as kit:
        assert kit.guarantees()["store"]["keyed_chain"] is True
        with kit.transaction("more"):
            charge(300)
    assert run(home, "--chain-key-file", str(key_file), "verify").exit_code == 0


def test_verify_proof_checks_a_keyed_bundle_with_the_key(
    keyed: tuple[Path, list[str]], home: Path, tmp_path: Path
) -> None:
    key_file, ids = keyed
    option = ["--chain-key-file", str(key_file)]
    bundle = tmp_path / "bundle.json"
    assert run(home, *option, "prove", ids[0], "-o", str(bundle)).exit_code == 0
    public = (home / "keys" / "checkpoint.pub").read_text().strip()
    checked = run(home, *option, "verify-proof", str(bundle), "--key", public)
    assert checked.exit_code == 0, checked.output
    assert f"verified: saga {ids[0]}" in checked.stdout
    unkeyed = run(home, "verify-proof", str(bundle), "--key", public)
    assert unkeyed.exit_code == 1
    assert "chain key" in unkeyed.stdout


# -- recover: a real crashed child with a keyed chain ----------------------------------------

TOOLS = textwrap.dedent(
    """
    import os
    from pathlib import Path
    from agent_saga import compensator, tool

    LEDGER = Path(os.environ["LEDGER_DIR"])


    def effect(action, key):
        with open(LEDGER / "journal", "a") as journal:
            journal.write(f"{action} {key}\\n")


    @compensator("kr.refund")
    def refund(result, idempotency_key):
        effect("refund", result)


    @compensator("kr.cancel")
    def cancel(result, idempotency_key):
        effect("cancel", result)


    @tool(name="kr.reserve", compensate="kr.cancel")
    def reserve(flight):
        effect("reserve", flight)
        return flight


    @tool(name="kr.charge", compensate="kr.refund")
    def charge(amount, idempotency_key):
        effect("charge", idempotency_key)
        return idempotency_key
    """
)

AGENT = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    import kr_tools as t
    from agent_saga import AgentKit

    key = Path(sys.argv[1]).read_text().strip().encode()
    kit = AgentKit(chain_key=key)
    with kit.transaction("trip"):
        t.reserve("LH400")
        t.charge(120)
        os.kill(os.getpid(), signal.SIGKILL)
    """
)


@pytest.fixture
def crashed(tmp_path: Path, home: Path) -> tuple[Path, Path, Path]:
    """A child that kept a keyed log died mid-saga; returns (code dir, ledger, key file)."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "kr_tools.py").write_text(TOOLS)
    (code / "agent.py").write_text(AGENT)
    ledger = tmp_path / "ledger"
    ledger.mkdir()
    key_file = tmp_path / "chain.key"
    write_key(key_file)
    env = {**os.environ, "LEDGER_DIR": str(ledger), "PYTHONPATH": str(code)}
    child = subprocess.run(
        [sys.executable, str(code / "agent.py"), str(key_file)], env=env, check=False, timeout=60
    )
    assert child.returncode == -9
    return code, ledger, key_file


def journal(ledger: Path) -> list[str]:
    return [line.split()[0] for line in (ledger / "journal").read_text().splitlines()]


def agent_saga(home: Path, cwd: Path, ledger: Path, *args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).parent / "agent-saga"
    return subprocess.run(
        [str(script), "--home", str(home), "--no-color", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "LEDGER_DIR": str(ledger)},
        check=False,
        timeout=120,
    )


def test_recover_finishes_a_crashed_keyed_saga_with_the_key(
    crashed: tuple[Path, Path, Path], home: Path
) -> None:
    code, ledger, key_file = crashed
    assert journal(ledger) == ["reserve", "charge"]
    refused = agent_saga(home, code, ledger, "recover", "--import", "kr_tools")
    assert refused.returncode == 1
    assert "chain key" in refused.stderr
    assert len(refused.stderr.splitlines()) == 1
    assert journal(ledger) == ["reserve", "charge"]  # nothing compensated without the key
    option = ["--chain-key-file", str(key_file)]
    done = agent_saga(home, code, ledger, *option, "recover", "--import", "kr_tools")
    assert done.returncode == 0, done.stderr
    assert "rolled_back" in done.stdout
    assert journal(ledger) == ["reserve", "charge", "refund", "cancel"]
    again = agent_saga(home, code, ledger, *option, "recover", "--import", "kr_tools")
    assert (again.returncode, again.stdout.strip()) == (0, "nothing to recover")
    verified = agent_saga(home, code, ledger, *option, "verify")
    assert verified.returncode == 0, verified.stdout


def test_a_changed_first_record_of_a_keyed_log_is_a_break_not_a_key_problem(
    keyed: tuple[Path, list[str]], home: Path
) -> None:
    key_file, _ = keyed
    log = home / "log.jsonl"
    lines = log.read_bytes().split(b"\n")
    assert b'"paid"' in lines[0]
    lines[0] = lines[0].replace(b'"paid"', b'"PAID"')  # record 1 changed, its hash kept
    log.write_bytes(b"\n".join(lines))
    result = run(home, "--chain-key-file", str(key_file), "verify")
    assert result.exit_code == 1
    said = result.output + result.stderr
    assert "chain key" not in said  # the key is right: it is no key problem
    assert "BROKEN at byte offset 0 (seq 1)" in said
