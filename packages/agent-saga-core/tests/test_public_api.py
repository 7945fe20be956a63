"""The public surface is pinned, and importing it stays light."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import agent_saga

EXPECTED = {
    "ApprovalChannel",
    "ApprovalRequest",
    "Approvals",
    "VoteResult",
    "action_digest",
    "submit_vote",
    "register_passkey",
    "revoke_passkey",
    "PasskeyRegistration",
    "AgentKit",
    "AgentSagaError",
    "Allow",
    "AllowTools",
    "AllowValues",
    "ArgumentTypes",
    "ArgumentsRefused",
    "Budget",
    "BudgetStore",
    "COMPENSABLE",
    "CompensationFailure",
    "CompensationState",
    "CompensatorRegistry",
    "ConfigurationError",
    "Consensus",
    "CorruptLogError",
    "Decision",
    "Deny",
    "DenyTools",
    "DenyValues",
    "EmbeddingRiskScorer",
    "Entry",
    "Escalation",
    "FakeClock",
    "FileBudgetStore",
    "FileKillSwitch",
    "FileLogStore",
    "Gate",
    "GateRefused",
    "HaltState",
    "HaltedError",
    "IRREVERSIBLE",
    "KillSwitch",
    "Kind",
    "LogError",
    "LogStore",
    "MaxValue",
    "MemoryBudgetStore",
    "MemoryKillSwitch",
    "MemoryLogStore",
    "Observer",
    "Observers",
    "OnRefusal",
    "PendingCall",
    "PostgresBudgetStore",
    "REVERSIBLE",
    "Range",
    "RateLimit",
    "Record",
    "RecoveredSaga",
    "RecoveryReport",
    "RedactionReport",
    "RefusedCall",
    "RequireApproval",
    "ResumeError",
    "RiskRule",
    "RiskScorer",
    "RollbackReport",
    "Rule",
    "Saga",
    "SagaEndedError",
    "SagaRolledBack",
    "SagaStatus",
    "SagaView",
    "SelfHealingExhausted",
    "SelfHealingLoop",
    "Semantics",
    "SequentialIds",
    "Status",
    "StepOutcome",
    "StepRecovery",
    "StepRef",
    "StepView",
    "StoreFailedError",
    "SystemClock",
    "ToolCall",
    "ToolCallGuard",
    "ToolDeclaration",
    "ToolFailed",
    "Transaction",
    "VerifyReport",
    "__version__",
    "build_history",
    "compensator",
    "current_saga",
    "declarations_for",
    "default_kit",
    "find_saga",
    "idempotency_key",
    "read_log",
    "recover",
    "redact_path",
    "require_approval",
    "saga_scope",
    "tool",
    "tool_spec",
    "use_kit",
    "verify_file",
    "FleetBudget",
    "Lease",
    "SpeculationError",
    "certify_merged",
    "merge_logs",
    "merged_view",
}


def test_public_names_are_pinned_and_sorted() -> None:
    assert set(agent_saga.__all__) == EXPECTED
    assert agent_saga.__all__ == sorted(agent_saga.__all__)
    for name in agent_saga.__all__:
        assert hasattr(agent_saga, name), name


def test_every_public_name_is_listed_before_its_first_use_and_a_near_miss_is_no_name() -> None:
    probe = (
        "import agent_saga\n"
        "print(sorted(set(agent_saga.__all__) - set(dir(agent_saga))))\n"
        "namespace = {}\n"
        "exec('from agent_saga import *', namespace)\n"
        "print(sorted(set(agent_saga.__all__) - set(namespace)))\n"
        "print(agent_saga.REVERSIBLE is agent_saga.Semantics.REVERSIBLE)\n"
        "try:\n"
        "    agent_saga.AgentKitt\n"
        "except AttributeError as exc:\n"
        "    print(exc)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert result.stdout.splitlines() == [
        "[]",
        "[]",
        "True",
        "module 'agent_saga' has no attribute 'AgentKitt'",
    ]


def test_importing_the_package_loads_no_module_of_the_engine_or_the_log() -> None:
    """``import agent_saga`` (as the command line does) costs only what a name first used
    needs: a command that shows a saga does not load the engine, the gate or the kit."""
    probe = (
        "import sys, agent_saga\n"
        "print(','.join(sorted(m for m in sys.modules if m.startswith('agent_saga.'))))\n"
        "agent_saga.SagaStatus\n"
        "print('agent_saga._log.records' in sys.modules,"
        " 'agent_saga._engine.saga' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert result.stdout.splitlines() == ["agent_saga._kit,agent_saga._kit.version", "True False"]


def test_import_loads_no_cli_library_or_framework() -> None:
    probe = (
        "import sys, agent_saga\n"
        "heavy = ['click', 'rich', 'langchain_core', 'llama_index', 'agents', 'opentelemetry',"
        " 'slack_bolt', 'asyncio', 'agent_saga.cli']\n"
        "print(','.join(m for m in heavy if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""


def test_opening_a_kit_and_running_a_saga_loads_no_audit_code(tmp_path: Path) -> None:
    """What opening a kit costs stays what it needs: the proofs it checks the index with, not
    certify, disclosures, passkeys or the history views (each imported at its first use)."""
    probe = (
        "import sys\n"
        "from agent_saga import REVERSIBLE, AgentKit\n"
        "kit = AgentKit(home=sys.argv[1])\n"
        "@kit.tool(semantics=REVERSIBLE)\n"
        "def add(x: int) -> int:\n"
        "    return x + 1\n"
        "with kit.transaction('one-step'):\n"
        "    add(1)\n"
        "heavy = ['agent_saga.proofs._certify', 'agent_saga.proofs._disclosure',"
        " 'agent_saga.proofs._passkey', 'agent_saga._history.views', 'cryptography']\n"
        "print(','.join(m for m in heavy if m in sys.modules))\n"
        "kit.close()\n"
    )
    for _ in range(2):  # a new home, then an existing one
        result = subprocess.run(
            [sys.executable, "-c", probe, str(tmp_path / "home")],
            capture_output=True,
            text=True,
            check=True,
        )
        assert result.stdout.strip() == ""


def test_version_matches_package_metadata() -> None:
    from importlib.metadata import version

    assert agent_saga.__version__ == version("agent-saga")
