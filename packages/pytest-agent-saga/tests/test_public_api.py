"""The public surface is pinned, every name resolves, and importing the package stays light."""

from __future__ import annotations

import subprocess
import sys

import pytest
import pytest_agent_saga

EXPECTED = {
    "FAULT_KINDS",
    "Baseline",
    "ChaosReport",
    "ChaosRunner",
    "Expect",
    "FaultKind",
    "FaultPoint",
    "InjectedFault",
    "Injector",
    "JournalLedger",
    "LedgerEvent",
    "PointResult",
    "ReplayDivergence",
    "RunOutcome",
    "ScriptedCall",
    "ScriptedTool",
    "Violation",
    "Write",
    "assert_exactly_once",
    "assert_log_verifies",
    "assert_replay_deterministic",
    "assert_rolled_back",
    "clean_environment",
    "register_fault_kind",
}


def test_public_names_are_pinned_and_resolve() -> None:
    assert set(pytest_agent_saga.__all__) == EXPECTED
    for name in EXPECTED:
        assert getattr(pytest_agent_saga, name) is not None, name
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        pytest_agent_saga.nope  # noqa: B018


def test_importing_the_package_imports_no_agent_saga_until_a_name_is_used() -> None:
    code = (
        "import sys, pytest_agent_saga as p; "
        "print('agent_saga' in sys.modules); p.JournalLedger; "
        "print('agent_saga' in sys.modules); p.assert_rolled_back; "
        "print('agent_saga' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False", "True"]
