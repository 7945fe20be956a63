"""The suite passes whatever the developer's shell sets.

A slice of the suite (the command line's tests, the README's examples, one adapter, and the
pytest plugin's fixtures as a user's suite sees them through ``pytester``) runs in a subprocess
whose environment sets every variable the product, click and rich read to a surprising value,
plus a C locale, a time zone fourteen hours from UTC, a random hash seed and a home directory
nothing may write to. It must pass. The same shell with the repository's pinning turned off
(``--inherit-environment``) must break it, or the first run proves nothing.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SLICE = (
    "packages/agent-saga-core/tests/test_cli.py",
    "tests/test_readme.py",
    "packages/agent-saga-langchain/tests/test_langchain_agent.py",
    "packages/pytest-agent-saga/tests/test_fixtures.py",
)
BROKEN_WITHOUT_PINNING = (
    "packages/agent-saga-core/tests/test_cli.py::test_home_comes_from_the_environment",
    "tests/test_readme.py::test_readme_blocks_run_and_print_what_they_claim",
)

HOSTILE_SHELL = {
    "NO_COLOR": "1",
    "FORCE_COLOR": "1",
    "CLICOLOR": "0",
    "CLICOLOR_FORCE": "1",
    "TERM": "dumb",
    "COLORTERM": "truecolor",
    "COLUMNS": "37",
    "LINES": "5",
    "TTY_COMPATIBLE": "1",
    "TTY_INTERACTIVE": "1",
    "JUPYTER_COLUMNS": "21",
    "JUPYTER_LINES": "3",
    "AGENT_SAGA_STORE": "memory",
    "AGENT_SAGA_KEY_PASSPHRASE": "a passphrase from the shell",
    "_AGENT_SAGA_COMPLETE": "bash_source",
    "LANGSMITH_TRACING": "true",
    "LANGCHAIN_TRACING_V2": "true",
    "LANGSMITH_API_KEY": "lsv2-from-the-shell",
    "LANG": "C",
    "LC_ALL": "C",
    "TZ": "Pacific/Kiritimati",
}
"""Set as given; ``HOME``, ``AGENT_SAGA_HOME`` and ``PYTHONHASHSEED`` are made per run."""


def hostile_environment(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """The subprocess's environment, and its home directory (mode 0500).

    ``AGENT_SAGA_HOME`` points below a regular file, so nothing can create it, not even root.
    The home's mode stops writes by anyone but root; the caller checks it is still empty.
    """
    home = tmp_path / "read-only-home"
    home.mkdir()
    home.chmod(0o500)
    not_a_directory = tmp_path / "not-a-directory"
    not_a_directory.write_text("")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")}
    env.update(HOSTILE_SHELL)
    env["HOME"] = str(home)
    env["AGENT_SAGA_HOME"] = str(not_a_directory / "agent-saga-home")
    env["PYTHONHASHSEED"] = str(random.randint(1, 4_294_967_295))
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # no bytecode written next to the repository's tests
    return env, home


def run_pytest(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-n0",  # one process: the outer suite already spreads over the cores
            f"--basetemp={tmp_path / 'inner'}",
            *args,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def report(result: subprocess.CompletedProcess[str], env: dict[str, str]) -> str:
    return (
        f"PYTHONHASHSEED={env['PYTHONHASHSEED']} (as root: {os.geteuid() == 0})\n"
        f"{result.stdout[-8000:]}\n{result.stderr[-4000:]}"
    )


def test_a_slice_of_the_suite_passes_in_a_hostile_shell(tmp_path: Path) -> None:
    env, home = hostile_environment(tmp_path)
    try:
        result = run_pytest(tmp_path, env, *SLICE)
    finally:
        home.chmod(0o700)
    assert result.returncode == 0, report(result, env)
    passed = re.search(r"\b(\d+) passed\b", result.stdout)
    assert passed is not None, report(result, env)
    assert int(passed.group(1)) >= 40, report(result, env)
    # Root is not stopped by the mode: what was written to the home is still there to see.
    assert sorted(p.name for p in home.iterdir()) == [], report(result, env)


def test_the_same_shell_breaks_the_suite_without_the_pinning(tmp_path: Path) -> None:
    env, home = hostile_environment(tmp_path)
    try:
        result = run_pytest(tmp_path, env, "--inherit-environment", *BROKEN_WITHOUT_PINNING)
    finally:
        home.chmod(0o700)
    assert result.returncode == 1, report(result, env)
    for test in BROKEN_WITHOUT_PINNING:
        assert f"FAILED {test}" in result.stdout, report(result, env)
