"""The package README: its example runs as a user's test file, and it names what the code has."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import pytest_agent_saga
from pytest_agent_saga import FAULT_KINDS, plugin

pytest_plugins = ["pytester"]

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


def python_block(filename: str) -> str:
    """The README's python block whose first line is a docstring naming ``filename``."""
    (block,) = [b for b in python_blocks() if b.startswith(f'"""{filename}"""')]
    return block


def test_every_python_block_is_run_by_a_test() -> None:
    assert [b.split("\n", 1)[0] for b in python_blocks()] == [
        '"""conftest.py"""',
        '"""test_travel_agent.py"""',
    ]


def test_the_example_agent_passes_its_tests(pytester: pytest.Pytester) -> None:
    example = python_block("test_travel_agent.py")
    pytester.makepyfile(test_travel_agent=example)
    result = pytester.runpytest("-p", "no:langsmith_plugin", "-W", "error", "-v")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*test_the_agent_survives_every_fault_point PASSED*"])


def test_the_example_catches_a_compensation_that_is_not_idempotent(
    pytester: pytest.Pytester,
) -> None:
    example = python_block("test_travel_agent.py")
    buggy = example.replace(
        '    def refund(idempotency_key):\n        once("refund", idempotency_key)',
        '    def refund(idempotency_key):\n        saga_ledger.record("refund", idempotency_key)',
    )
    assert buggy != example
    pytester.makepyfile(test_travel_agent=buggy)
    result = pytester.runpytest("-p", "no:langsmith_plugin", "-k", "fault_point")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*the compensation of step #3 travel.charge took effect 2 times (ledger: 'refund'*"]
    )


def test_the_readme_names_every_fixture_fault_kind_and_public_name() -> None:
    text = README.read_text()
    fixtures = [
        name
        for name in vars(plugin)
        if name.startswith("saga_") and callable(getattr(plugin, name))
    ]
    assert sorted(fixtures) == [
        "saga_chaos",
        "saga_clock",
        "saga_home",
        "saga_kit",
        "saga_ledger",
        "saga_memory_store",
        "saga_scripted_tool",
    ]
    for name in [*fixtures, *FAULT_KINDS, "register_fault_kind", "--saga-faults", "saga_faults"]:
        assert name in text, name
    for name in pytest_agent_saga.__all__:
        if name.startswith("assert_"):
            assert f"`{name}(" in text, name


def test_the_conftest_example_keeps_the_shells_settings_out_of_plain_tests(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    shell = {
        "AGENT_SAGA_STORE": "memory",
        "NO_COLOR": "1",
        "MYAPP_TOKEN": "from-the-shell",
        "AGENT_SAGA_TEST_PG_URL": "postgresql://kept@127.0.0.1/db",
    }
    for name, value in shell.items():
        monkeypatch.setenv(name, value)
    pytester.makeconftest(python_block("conftest.py"))
    pytester.makepyfile(
        test_plain="""
import os

def test_no_fixture_sees_the_shell():
    assert "AGENT_SAGA_STORE" not in os.environ
    assert "NO_COLOR" not in os.environ
    assert "MYAPP_TOKEN" not in os.environ
    assert os.environ["AGENT_SAGA_TEST_PG_URL"] == "postgresql://kept@127.0.0.1/db"
"""
    )
    pytester.runpytest("-p", "no:langsmith_plugin", "-W", "error").assert_outcomes(passed=1)
    assert {name: os.environ.get(name) for name in shell} == shell  # restored afterwards
