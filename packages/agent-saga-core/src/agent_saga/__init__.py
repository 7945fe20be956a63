"""agent-saga: transactions for an AI agent's tool calls.

A pre-flight gate decides before each call; the intent goes to a hash-chained write-ahead log,
durable before any non-reversible effect; a failure compensates the committed steps in exact
reverse order.

Every public name is imported from its module at its first use (PEP 562): ``import agent_saga``
loads no engine module, so a command or a process that needs one part of the library pays for
that part only. ``from agent_saga import AgentKit`` loads the kit and what it uses; the names
are the same objects as in their modules, and type checkers see them through ordinary imports.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from ._kit.version import __version__

if TYPE_CHECKING:
    from ._approvals.passkeys import PasskeyRegistration, register_passkey, revoke_passkey
    from ._approvals.request import ApprovalRequest, action_digest
    from ._approvals.votes import VoteResult, submit_vote
    from ._approvals.wait import ApprovalChannel, Approvals
    from ._clock import FakeClock, SequentialIds, SystemClock
    from ._engine.adapt import (
        OnRefusal,
        PendingCall,
        RefusedCall,
        ToolCallGuard,
        ToolDeclaration,
        ToolFailed,
        declarations_for,
    )
    from ._engine.compensation import CompensatorRegistry, compensator
    from ._engine.events import Observers
    from ._engine.observe import Observer
    from ._engine.report import CompensationFailure, RollbackReport, SagaRolledBack, StepRef
    from ._engine.saga import Saga, current_saga, idempotency_key
    from ._engine.selfheal import Escalation, SelfHealingExhausted, SelfHealingLoop
    from ._engine.speculation.lease import Lease
    from ._engine.tool import tool, tool_spec
    from ._engine.transaction import Transaction
    from ._errors import (
        AgentSagaError,
        ArgumentsRefused,
        ConfigurationError,
        CorruptLogError,
        GateRefused,
        HaltedError,
        LogError,
        ResumeError,
        SagaEndedError,
        SpeculationError,
        StoreFailedError,
    )
    from ._gate.budget import Budget
    from ._gate.budget_file import FileBudgetStore
    from ._gate.budget_pg import PostgresBudgetStore
    from ._gate.budget_store import BudgetStore, MemoryBudgetStore
    from ._gate.consensus import Consensus
    from ._gate.decisions import (
        Allow,
        Decision,
        Deny,
        DenyTools,
        Gate,
        MaxValue,
        RequireApproval,
        Rule,
        ToolCall,
    )
    from ._gate.killswitch import FileKillSwitch, HaltState, KillSwitch, MemoryKillSwitch
    from ._gate.risk import EmbeddingRiskScorer, RiskRule, RiskScorer
    from ._gate.rules import AllowTools, AllowValues, DenyValues, Range, RateLimit, require_approval
    from ._gate.typecheck import ArgumentTypes
    from ._history.build import (
        CompensationState,
        SagaView,
        StepOutcome,
        StepView,
        build_history,
    )
    from ._history.lookup import find_saga
    from ._history.recovery import RecoveredSaga, RecoveryReport, StepRecovery, recover
    from ._kit.agentkit import AgentKit
    from ._kit.defaults import default_kit, saga_scope, use_kit
    from ._kit.manifest import Status
    from ._log.filestore import FileLogStore
    from ._log.read import read_log, verify_file
    from ._log.records import Entry, Kind, Record, SagaStatus, Semantics
    from ._log.store import LogStore, MemoryLogStore, VerifyReport
    from .proofs._mesh.certify import certify_merged
    from .proofs._mesh.conflicts import FleetBudget
    from .proofs._mesh.merge import merge_logs
    from .proofs._mesh.view import merged_view
    from .proofs._redact import RedactionReport, redact_path

    COMPENSABLE = Semantics.COMPENSABLE
    IRREVERSIBLE = Semantics.IRREVERSIBLE
    REVERSIBLE = Semantics.REVERSIBLE

_SOURCES = {
    "action_digest": "_approvals.request",
    "AgentKit": "_kit.agentkit",
    "AgentSagaError": "_errors",
    "Allow": "_gate.decisions",
    "AllowTools": "_gate.rules",
    "AllowValues": "_gate.rules",
    "ApprovalChannel": "_approvals.wait",
    "ApprovalRequest": "_approvals.request",
    "Approvals": "_approvals.wait",
    "ArgumentsRefused": "_errors",
    "ArgumentTypes": "_gate.typecheck",
    "Budget": "_gate.budget",
    "BudgetStore": "_gate.budget_store",
    "build_history": "_history.build",
    "certify_merged": "proofs._mesh.certify",
    "CompensationFailure": "_engine.report",
    "CompensationState": "_history.build",
    "compensator": "_engine.compensation",
    "CompensatorRegistry": "_engine.compensation",
    "ConfigurationError": "_errors",
    "Consensus": "_gate.consensus",
    "CorruptLogError": "_errors",
    "current_saga": "_engine.saga",
    "Decision": "_gate.decisions",
    "declarations_for": "_engine.adapt",
    "default_kit": "_kit.defaults",
    "Deny": "_gate.decisions",
    "DenyTools": "_gate.decisions",
    "DenyValues": "_gate.rules",
    "EmbeddingRiskScorer": "_gate.risk",
    "Entry": "_log.records",
    "Escalation": "_engine.selfheal",
    "FakeClock": "_clock",
    "FileBudgetStore": "_gate.budget_file",
    "FileKillSwitch": "_gate.killswitch",
    "FileLogStore": "_log.filestore",
    "find_saga": "_history.lookup",
    "FleetBudget": "proofs._mesh.conflicts",
    "Gate": "_gate.decisions",
    "GateRefused": "_errors",
    "HaltedError": "_errors",
    "HaltState": "_gate.killswitch",
    "idempotency_key": "_engine.saga",
    "KillSwitch": "_gate.killswitch",
    "Kind": "_log.records",
    "Lease": "_engine.speculation.lease",
    "LogError": "_errors",
    "LogStore": "_log.store",
    "MaxValue": "_gate.decisions",
    "MemoryBudgetStore": "_gate.budget_store",
    "MemoryKillSwitch": "_gate.killswitch",
    "MemoryLogStore": "_log.store",
    "merge_logs": "proofs._mesh.merge",
    "merged_view": "proofs._mesh.view",
    "Observer": "_engine.observe",
    "Observers": "_engine.events",
    "OnRefusal": "_engine.adapt",
    "PasskeyRegistration": "_approvals.passkeys",
    "PendingCall": "_engine.adapt",
    "PostgresBudgetStore": "_gate.budget_pg",
    "Range": "_gate.rules",
    "RateLimit": "_gate.rules",
    "read_log": "_log.read",
    "Record": "_log.records",
    "recover": "_history.recovery",
    "RecoveredSaga": "_history.recovery",
    "RecoveryReport": "_history.recovery",
    "redact_path": "proofs._redact",
    "RedactionReport": "proofs._redact",
    "RefusedCall": "_engine.adapt",
    "register_passkey": "_approvals.passkeys",
    "require_approval": "_gate.rules",
    "RequireApproval": "_gate.decisions",
    "ResumeError": "_errors",
    "revoke_passkey": "_approvals.passkeys",
    "RiskRule": "_gate.risk",
    "RiskScorer": "_gate.risk",
    "RollbackReport": "_engine.report",
    "Rule": "_gate.decisions",
    "Saga": "_engine.saga",
    "saga_scope": "_kit.defaults",
    "SagaEndedError": "_errors",
    "SagaRolledBack": "_engine.report",
    "SagaStatus": "_log.records",
    "SagaView": "_history.build",
    "SelfHealingExhausted": "_engine.selfheal",
    "SelfHealingLoop": "_engine.selfheal",
    "Semantics": "_log.records",
    "SequentialIds": "_clock",
    "SpeculationError": "_errors",
    "Status": "_kit.manifest",
    "StepOutcome": "_history.build",
    "StepRecovery": "_history.recovery",
    "StepRef": "_engine.report",
    "StepView": "_history.build",
    "StoreFailedError": "_errors",
    "submit_vote": "_approvals.votes",
    "SystemClock": "_clock",
    "tool": "_engine.tool",
    "tool_spec": "_engine.tool",
    "ToolCall": "_gate.decisions",
    "ToolCallGuard": "_engine.adapt",
    "ToolDeclaration": "_engine.adapt",
    "ToolFailed": "_engine.adapt",
    "Transaction": "_engine.transaction",
    "use_kit": "_kit.defaults",
    "verify_file": "_log.read",
    "VerifyReport": "_log.store",
    "VoteResult": "_approvals.votes",
}
"""Each public name's module, relative to this package."""

_SEMANTICS = frozenset({"COMPENSABLE", "IRREVERSIBLE", "REVERSIBLE"})
"""The members of :class:`Semantics` also exported by name."""


if not TYPE_CHECKING:  # type checkers see the imports above, and so refuse a misspelled name

    def __getattr__(name: str) -> Any:
        """The public name ``name``, imported from its module at first use."""
        if name in _SEMANTICS:
            value = getattr(__getattr__("Semantics"), name)
        else:
            source = _SOURCES.get(name)
            if source is None:
                raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
            value = getattr(import_module(f".{source}", __name__), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    """The module's names, the public ones included before their first use."""
    return sorted({*globals(), *__all__})


__all__ = [
    "AgentKit",
    "AgentSagaError",
    "Allow",
    "AllowTools",
    "AllowValues",
    "ApprovalChannel",
    "ApprovalRequest",
    "Approvals",
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
    "FleetBudget",
    "Gate",
    "GateRefused",
    "HaltState",
    "HaltedError",
    "IRREVERSIBLE",
    "KillSwitch",
    "Kind",
    "Lease",
    "LogError",
    "LogStore",
    "MaxValue",
    "MemoryBudgetStore",
    "MemoryKillSwitch",
    "MemoryLogStore",
    "Observer",
    "Observers",
    "OnRefusal",
    "PasskeyRegistration",
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
    "SpeculationError",
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
    "VoteResult",
    "__version__",
    "action_digest",
    "build_history",
    "certify_merged",
    "compensator",
    "current_saga",
    "declarations_for",
    "default_kit",
    "find_saga",
    "idempotency_key",
    "merge_logs",
    "merged_view",
    "read_log",
    "recover",
    "redact_path",
    "register_passkey",
    "require_approval",
    "revoke_passkey",
    "saga_scope",
    "submit_vote",
    "tool",
    "tool_spec",
    "use_kit",
    "verify_file",
]
