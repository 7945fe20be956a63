"""agent-saga: transactions for an AI agent's tool calls.

A pre-flight gate decides before each call; the intent goes to a hash-chained write-ahead log,
durable before any non-reversible effect; a failure compensates the committed steps in exact
reverse order.
"""

import importlib
from typing import TYPE_CHECKING

from ._adapt import (
    OnRefusal,
    PendingCall,
    RefusedCall,
    ToolCallGuard,
    ToolDeclaration,
    ToolFailed,
    declarations_for,
)
from ._budget import Budget
from ._budget_file import FileBudgetStore
from ._budget_store import BudgetStore, MemoryBudgetStore
from ._clock import FakeClock, SequentialIds, SystemClock
from ._compensation import CompensatorRegistry, compensator
from ._consensus import Consensus
from ._errors import (
    AgentSagaError,
    ArgumentsRefused,
    ConfigurationError,
    CorruptLogError,
    GateRefused,
    HaltedError,
    LogError,
    SagaRolledBack,
    StoreFailedError,
)
from ._filestore import FileLogStore
from ._gate import Allow, Decision, Deny, DenyTools, Gate, MaxValue, RequireApproval, Rule, ToolCall
from ._killswitch import FileKillSwitch, HaltState, KillSwitch, MemoryKillSwitch
from ._kit import AgentKit, default_kit, saga_scope, use_kit
from ._logread import read_log, verify_file
from ._manifest import Status
from ._observe import Observer, Observers
from ._records import Entry, Kind, Record, SagaStatus
from ._report import CompensationFailure, RollbackReport, StepRef
from ._risk import EmbeddingRiskScorer, RiskRule, RiskScorer
from ._rules import AllowTools, AllowValues, DenyValues, Range, RateLimit, require_approval
from ._saga import Saga, current_saga, idempotency_key
from ._selfheal import Escalation, SelfHealingExhausted, SelfHealingLoop
from ._semantics import Semantics
from ._store import LogStore, MemoryLogStore, VerifyReport
from ._tool import tool, tool_spec
from ._transaction import Transaction
from ._typecheck import ArgumentTypes
from ._version import __version__

if TYPE_CHECKING:
    from ._approval import ApprovalRequest, action_digest
    from ._approvals import ApprovalChannel, Approvals, VoteResult, submit_vote
    from ._budget_pg import PostgresBudgetStore
    from ._history import (
        CompensationState,
        SagaView,
        StepOutcome,
        StepView,
        build_history,
        find_saga,
    )
    from ._recovery import RecoveredSaga, RecoveryReport, StepRecovery, recover
    from ._redact_file import RedactionReport, redact_path

# Loaded on first use: reading history and recovering are not needed to run transactions, and
# importing agent_saga stays light.
_LAZY = {
    "PostgresBudgetStore": "_budget_pg",
    "CompensationState": "_history",
    "SagaView": "_history",
    "StepOutcome": "_history",
    "StepView": "_history",
    "build_history": "_history",
    "find_saga": "_history",
    "RecoveredSaga": "_recovery",
    "RecoveryReport": "_recovery",
    "StepRecovery": "_recovery",
    "recover": "_recovery",
    "RedactionReport": "_redact_file",
    "redact_path": "_redact_file",
    "ApprovalChannel": "_approvals",
    "ApprovalRequest": "_approval",
    "Approvals": "_approvals",
    "VoteResult": "_approvals",
    "action_digest": "_approval",
    "submit_vote": "_approvals",
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
    "RiskRule",
    "RiskScorer",
    "RollbackReport",
    "Rule",
    "Saga",
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
    "VoteResult",
    "__version__",
    "action_digest",
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
    "submit_vote",
    "tool",
    "tool_spec",
    "use_kit",
    "verify_file",
]
