"""agent-saga: transactions for an AI agent's tool calls.

A pre-flight gate decides before each call; the intent goes to a hash-chained write-ahead log,
durable before any non-reversible effect; a failure compensates the committed steps in exact
reverse order.
"""

import importlib
from typing import TYPE_CHECKING

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
from ._kit.agentkit import AgentKit
from ._kit.defaults import default_kit, saga_scope, use_kit
from ._kit.manifest import Status
from ._kit.version import __version__
from ._log.filestore import FileLogStore
from ._log.read import read_log, verify_file
from ._log.records import Entry, Kind, Record, SagaStatus, Semantics
from ._log.store import LogStore, MemoryLogStore, VerifyReport

if TYPE_CHECKING:
    from ._approvals.passkeys import PasskeyRegistration, register_passkey, revoke_passkey
    from ._approvals.request import ApprovalRequest, action_digest
    from ._approvals.votes import VoteResult, submit_vote
    from ._approvals.wait import ApprovalChannel, Approvals
    from ._engine.speculation.lease import Lease
    from ._gate.budget_pg import PostgresBudgetStore
    from ._history.build import (
        CompensationState,
        SagaView,
        StepOutcome,
        StepView,
        build_history,
    )
    from ._history.lookup import find_saga
    from ._history.recovery import RecoveredSaga, RecoveryReport, StepRecovery, recover
    from .proofs._mesh.certify import certify_merged
    from .proofs._mesh.conflicts import FleetBudget
    from .proofs._mesh.merge import merge_logs
    from .proofs._mesh.view import merged_view
    from .proofs._redact import RedactionReport, redact_path

# Loaded on first use: reading history and recovering are not needed to run transactions, and
# importing agent_saga stays light.
_LAZY = {
    "PostgresBudgetStore": "_gate.budget_pg",
    "CompensationState": "_history.build",
    "SagaView": "_history.build",
    "StepOutcome": "_history.build",
    "StepView": "_history.build",
    "build_history": "_history.build",
    "find_saga": "_history.lookup",
    "RecoveredSaga": "_history.recovery",
    "RecoveryReport": "_history.recovery",
    "StepRecovery": "_history.recovery",
    "recover": "_history.recovery",
    "RedactionReport": "proofs._redact",
    "redact_path": "proofs._redact",
    "ApprovalChannel": "_approvals.wait",
    "ApprovalRequest": "_approvals.request",
    "Approvals": "_approvals.wait",
    "VoteResult": "_approvals.votes",
    "action_digest": "_approvals.request",
    "submit_vote": "_approvals.votes",
    "PasskeyRegistration": "_approvals.passkeys",
    "register_passkey": "_approvals.passkeys",
    "revoke_passkey": "_approvals.passkeys",
    "FleetBudget": "proofs._mesh.conflicts",
    "certify_merged": "proofs._mesh.certify",
    "merge_logs": "proofs._mesh.merge",
    "merged_view": "proofs._mesh.view",
    "Lease": "_engine.speculation.lease",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'agent_saga' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"agent_saga.{module}"), name)
    globals()[name] = value
    return value


COMPENSABLE = Semantics.COMPENSABLE
IRREVERSIBLE = Semantics.IRREVERSIBLE
REVERSIBLE = Semantics.REVERSIBLE

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
