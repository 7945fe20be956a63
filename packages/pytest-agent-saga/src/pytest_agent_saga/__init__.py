"""pytest plugin for agent-saga.

Isolated homes, scripted tools, chaos runs over every fault point, replay assertions.

Importing this package imports nothing but the standard library: the plugin is loaded into
every pytest run of a project that installs it, so agent-saga itself is imported only when a
test uses one of its fixtures or names.
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._assertions import assert_exactly_once, assert_log_verifies, assert_rolled_back
    from ._chaos import ChaosRunner
    from ._environment import clean_environment
    from ._faults import (
        FAULT_KINDS,
        Baseline,
        Expect,
        FaultKind,
        FaultPoint,
        InjectedFault,
        Injector,
        Write,
        register_fault_kind,
    )
    from ._invariants import RunOutcome, Violation
    from ._ledger import JournalLedger, LedgerEvent
    from ._replay import ReplayDivergence, assert_replay_deterministic
    from ._report import ChaosReport, PointResult
    from ._scripted import ScriptedCall, ScriptedTool

_LAZY = {
    "assert_exactly_once": "_assertions",
    "assert_log_verifies": "_assertions",
    "assert_rolled_back": "_assertions",
    "ChaosReport": "_report",
    "ChaosRunner": "_chaos",
    "PointResult": "_report",
    "clean_environment": "_environment",
    "FAULT_KINDS": "_faults",
    "Baseline": "_faults",
    "Expect": "_faults",
    "FaultKind": "_faults",
    "FaultPoint": "_faults",
    "InjectedFault": "_faults",
    "Injector": "_faults",
    "Write": "_faults",
    "register_fault_kind": "_faults",
    "RunOutcome": "_invariants",
    "Violation": "_invariants",
    "JournalLedger": "_ledger",
    "LedgerEvent": "_ledger",
    "ReplayDivergence": "_replay",
    "assert_replay_deterministic": "_replay",
    "ScriptedCall": "_scripted",
    "ScriptedTool": "_scripted",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_agent_saga' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"pytest_agent_saga.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
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
]
