"""The package README: its example runs as a user's test file, and it names what the code has."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import pytest_agent_saga
from pytest_agent_saga import FAULT_KINDS, plugin

pytest_plugins = ["pytester"]

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_the_example_agent_passes_its_tests(pytester: pytest.Pytester) -> None:
    (example,) = python_blocks()
    pytester.makepyfile(test_travel_agent=example)
    result = pytester.runpytest("-p", "no:langsmith_plugin", "-W", "error", "-v")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*test_the_agent_survives_every_fault_point PASSED*"])


def test_the_example_catches_a_compensation_that_is_not_idempotent(
    pytester: pytest.Pytester,
) -> None:
    (example,) = python_blocks()
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
