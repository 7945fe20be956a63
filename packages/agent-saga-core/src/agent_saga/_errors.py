"""Exception types raised by agent-saga.

Every error the library raises on purpose derives from :class:`AgentSagaError`, so callers can
catch the library's refusals and failures without catching unrelated bugs. The errors of every
layer live here, at the bottom, except :class:`~agent_saga.SagaRolledBack`, which carries a
rollback report and so lives with it in ``_engine/report.py``.
"""

from __future__ import annotations


class AgentSagaError(Exception):
    """Base class of every error agent-saga raises on purpose."""


class ConfigurationError(AgentSagaError, ValueError):
    """A tool, compensator, store or kit was declared or configured in a way that cannot work."""


class GateRefused(AgentSagaError):
    """The pre-flight gate refused a call; the tool body did not run.

    Attributes:
        tool: name of the refused tool.
        rule: name of the rule (or built-in check) that decided.
        reason: human-readable reason, suitable to show to an agent so it can correct itself.
    """

    def __init__(self, tool: str, rule: str, reason: str) -> None:
        super().__init__(f"{tool}: refused by {rule}: {reason}")
        self.tool = tool
        self.rule = rule
        self.reason = reason


class ArgumentsRefused(GateRefused, TypeError):
    """The call's arguments do not fit the tool's signature; the tool body did not run."""


class HaltedError(GateRefused):
    """The global kill switch is engaged (or its state cannot be read): no effect may run."""

    def __init__(self, tool: str, reason: str) -> None:
        super().__init__(tool, "kill_switch", reason)
        self.args = (f"{tool}: halted: {reason}",)


class SagaEndedError(AgentSagaError):
    """A step was asked of a saga that has ended or was suspended (a run that outlived its
    transaction); nothing was logged and the tool body did not run."""


class ResumeError(AgentSagaError):
    """A saga cannot be resumed: it does not exist, has ended, is running elsewhere, has expired,
    or holds a step whose compensation only its first process could run."""


class LogError(AgentSagaError):
    """Base class of write-ahead log failures."""


class CorruptLogError(LogError):
    """The log's bytes do not form a valid hash chain.

    Attributes:
        path: the log file (or store description).
        offset: byte offset of the first bad record (record index for non-file stores).
        seq: sequence number expected at that position, when known.
        reason: what is wrong there.
    """

    def __init__(self, path: str, offset: int, reason: str, seq: int | None = None) -> None:
        where = f"{path} at offset {offset}" + (f" (seq {seq})" if seq is not None else "")
        super().__init__(f"log corrupt: {where}: {reason}")
        self.path = path
        self.offset = offset
        self.seq = seq
        self.reason = reason


class StoreFailedError(LogError):
    """A write or fsync failed; the store refuses further appends until it is reopened.

    After an fsync error the kernel may have dropped the dirty pages, so retrying could report
    success for data that never reached the disk. Nothing appended by the failing call was
    acknowledged.
    """


class LeaseLostError(LogError):
    """A lease's holder wrote after the lease expired or was taken over: nothing was written.

    The store itself goes on; only writes fenced by this lease are refused from now on.
    """


class LogLockedError(LogError):
    """Another open store in this process already owns the log (one writer object per file)."""


class SpeculationError(AgentSagaError, ValueError):
    """A step cannot be run ahead of confirmation: it is not REVERSIBLE, not a tool of this
    kit, called outside a transaction, or its arguments cannot be bound by a lease."""
