"""Operations at the edges: a damaged public key, a saga that still needs a human, and reading
a home that cannot be written.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from agent_saga import AgentKit, Entry, SagaStatus, build_history, compensator, read_log, tool
from agent_saga._approvals.request import REQUESTED, ApprovalRequest
from agent_saga.cli import main
from click.testing import CliRunner, Result


@compensator("ops.unbook")
def _unbook(result: str) -> None:
    return None


@tool(name="ops.book", semantics="compensable", compensate="ops.unbook")
def book(room: str) -> str:
    return f"booking-{room}"


def run(home: Path, *args: str) -> Result:
    return CliRunner().invoke(main, ["--home", str(home), *args])


def one_saga(home: Path) -> None:
    with AgentKit(home=home) as kit, kit.transaction("stay"):
        book("101")


# -- a public key that is not UTF-8 ------------------------------------------------------------


@pytest.fixture
def garbled_key(home: Path) -> Path:
    one_saga(home)
    public = home / "keys" / "checkpoint.pub"
    public.write_bytes(b"agent-saga.log/\xff\xfe+00000000+\x80\x81")
    return public


def test_verify_reports_a_non_utf8_public_key_in_one_line(garbled_key: Path, home: Path) -> None:
    result = run(home, "verify")
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    (line,) = result.stderr.splitlines()
    assert line.startswith("Error: ")
    assert str(garbled_key) in line


def test_status_is_not_ready_with_a_non_utf8_public_key(garbled_key: Path, home: Path) -> None:
    result = run(home, "status")
    assert result.exit_code == 1, result.output
    assert "NOT READY" in result.stdout
    assert "checkpoint.pub" in result.stdout
    assert "checkpoints  ok" not in result.stdout


# -- recover while a saga still needs a human ------------------------------------------------

TOOLS = textwrap.dedent(
    """
    import os
    from pathlib import Path
    from agent_saga import compensator, tool

    LEDGER = Path(os.environ["LEDGER_DIR"])


    @compensator("nh.refund")
    def refund(result):
        raise ConnectionError("payments API down")


    @tool(name="nh.charge", compensate="nh.refund")
    def charge(amount):
        (LEDGER / "charged").write_text(str(amount))
        return f"ch_{amount}"
    """
)

AGENT = textwrap.dedent(
    """
    import os, signal
    import nh_tools as t
    from agent_saga import saga_scope

    with saga_scope("trip"):
        t.charge(120)
        os.kill(os.getpid(), signal.SIGKILL)
    """
)


@pytest.fixture
def crashed(tmp_path: Path) -> tuple[Path, Path]:
    code = tmp_path / "code"
    code.mkdir()
    (code / "nh_tools.py").write_text(TOOLS)
    (code / "agent.py").write_text(AGENT)
    ledger = tmp_path / "ledger"
    ledger.mkdir()
    env = {**os.environ, "LEDGER_DIR": str(ledger), "PYTHONPATH": str(code)}
    child = subprocess.run([sys.executable, str(code / "agent.py")], env=env, check=False)
    assert child.returncode == -9
    return code, ledger


def recover(home: Path, code: Path, ledger: Path) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).parent / "agent-saga"
    return subprocess.run(
        [str(script), "--home", str(home), "--no-color", "recover", "--import", "nh_tools"],
        capture_output=True,
        text=True,
        cwd=code,
        env={**os.environ, "LEDGER_DIR": str(ledger)},
        check=False,
        timeout=120,
    )


def test_a_second_recover_still_reports_the_saga_that_needs_a_human(
    crashed: tuple[Path, Path], home: Path
) -> None:
    code, ledger = crashed
    first = recover(home, code, ledger)
    assert first.returncode == 3, first.stderr
    assert "needs_human" in first.stdout
    (saga_id,) = {line.split()[0] for line in first.stdout.splitlines() if "needs_human" in line}
    second = recover(home, code, ledger)
    assert second.returncode == 3, second.stdout
    assert saga_id in second.stdout
    assert "still needs a human" in second.stdout
    assert "nothing to recover" not in second.stdout
    assert f"needs a human: {saga_id}" in second.stderr


def test_settle_takes_a_needs_human_saga_off_the_list_and_says_who(
    crashed: tuple[Path, Path], home: Path
) -> None:
    code, ledger = crashed
    first = recover(home, code, ledger)
    (saga_id,) = {line.split()[0] for line in first.stdout.splitlines() if "needs_human" in line}
    assert run(home, "settle", saga_id[:8], "--note", "").exit_code == 2  # a note is required
    settled = run(home, "settle", saga_id[:8], "--note", "refunded by hand, ticket 42")
    assert settled.exit_code == 0, settled.output
    assert f"settled {saga_id}" in settled.output
    again = run(home, "settle", saga_id, "--note", "twice")
    assert again.exit_code == 2
    assert "settled already" in again.output
    second = recover(home, code, ledger)
    assert second.returncode == 0, second.stdout + second.stderr
    assert saga_id not in second.stdout
    (view,) = build_history(read_log(home / "log.jsonl")).sagas
    assert view.status is SagaStatus.NEEDS_HUMAN  # the log keeps what happened
    assert view.settled is not None
    assert "ticket 42" in view.settled
    certified = run(home, "certify")
    assert "settled by unix:" in certified.output


def test_settle_refuses_a_saga_that_does_not_need_a_human(home: Path) -> None:
    one_saga(home)
    (view,) = build_history(read_log(home / "log.jsonl")).sagas
    result = run(home, "settle", view.id, "--note", "nothing to do")
    assert result.exit_code == 2
    assert "not needs_human" in result.output


# -- reading a home that cannot be written ------------------------------------------------------

READ_ONLY = textwrap.dedent(
    """
    import errno, os, sys

    HOME = os.path.realpath(sys.argv[1])
    WRITES = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    PATH_EVENTS = {
        "os.mkdir", "os.rename", "os.replace", "os.remove", "os.rmdir", "os.truncate",
        "os.chmod", "os.chown", "os.link", "os.symlink", "os.utime",
    }


    def inside(path):
        if isinstance(path, int) or path is None:
            return False
        path = os.path.realpath(os.fsdecode(path))
        return path == HOME or path.startswith(HOME + os.sep)


    def refuse(path):
        raise OSError(errno.EROFS, "Read-only file system", os.fsdecode(path))


    def read_only_home(event, args):
        if event == "open":
            path, mode, flags = args
            if inside(path) and (flags & WRITES or (mode and set(mode) & set("wax+"))):
                refuse(path)
        elif event in PATH_EVENTS:
            for path in args[:2]:
                if isinstance(path, (str, bytes, os.PathLike)) and inside(path):
                    refuse(path)


    sys.addaudithook(read_only_home)
    from agent_saga.cli import main

    main(["--home", sys.argv[1], *sys.argv[2:]])
    """
)


def run_read_only(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run a command with ``home`` read-only: file modes, and (since root ignores modes) every
    attempt to open a file there for writing, create, rename or remove one fails with EROFS, as
    on a read-only mount."""
    for path in [home, *home.rglob("*")]:
        path.chmod(path.stat().st_mode & 0o555)
    try:
        return subprocess.run(
            [sys.executable, "-c", READ_ONLY, str(home), *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
    finally:
        for path in [home, *home.rglob("*")]:
            path.chmod(path.stat().st_mode | 0o200)


@pytest.fixture
def pending_request(home: Path) -> ApprovalRequest:
    request = ApprovalRequest(
        id="req-0123456789abcdef",
        saga="wire-saga",
        ordinal=1,
        tool="bank.wire",
        semantics="irreversible",
        digest="d" * 64,
        args={"usd": 5000},
        rule="needs_approval",
        reason="over the limit",
        approvers=("unix:alice",),
        quorum=1,
        requested_at=time.time(),
        expires_at=time.time() + 3600,
    )
    with AgentKit(home=home) as kit:
        entry = Entry(REQUESTED, request.saga, request.to_data(), int(time.time() * 1000))
        kit.store.append([entry], sync=True)
    return request


def test_approvals_lists_pending_requests_from_a_read_only_home(
    pending_request: ApprovalRequest, home: Path
) -> None:
    before = sorted((p.relative_to(home), p.stat().st_size) for p in home.rglob("*"))
    result = run_read_only(home, "approvals")
    assert result.returncode == 0, result.stderr
    assert pending_request.id in result.stdout
    assert '"usd": 5000' in result.stdout
    assert sorted((p.relative_to(home), p.stat().st_size) for p in home.rglob("*")) == before


@pytest.mark.parametrize("command", [["sagas"], ["replay", "wire-saga"], ["verify"]])
def test_reading_commands_work_on_a_read_only_home(
    pending_request: ApprovalRequest, home: Path, command: list[str]
) -> None:
    result = run_read_only(home, *command)
    assert result.returncode == 0, result.stderr + result.stdout


def test_the_read_only_harness_refuses_writes(home: Path) -> None:
    """The harness is honest: a command that writes to the home fails under it."""
    one_saga(home)
    result = run_read_only(home, "checkpoint")
    assert result.returncode != 0
    assert "Read-only file system" in result.stderr
