"""The parts an engine runs on, injected so nothing in a saga reaches for globals.

Approvals sit in a layer above the engine: the engine knows them only as a
:class:`StepApprover`, handed one :class:`ApprovalStep` per call the gate marks
``RequireApproval``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from .._clock import Clock, IdSource
from .._gate.decisions import Gate, RequireApproval
from .._gate.killswitch import KillSwitch
from .._log.codec import JSONValue
from .._log.records import Kind
from .._log.store import LogStore
from .compensation import CompensatorRegistry
from .events import Observers
from .report import StepRef
from .spec import ToolRegistry, ToolSpec


class ApprovalStep:
    """One step that waits for humans, as the engine hands it to its :class:`StepApprover`.

    ``args`` are the values the tool will receive; ``shown_args`` the same values as logged
    (masked where the tool declared ``redact=``). ``log(kind, data, durable)`` appends a record
    to the step's saga; ``requested`` and ``decided`` tell the saga's observers. (A plain class:
    a dataclass would cost ``import agent_saga`` about 2 ms, and this one is built rarely.)
    """

    __slots__ = (
        "args", "clock", "decided", "decision", "log", "ref", "requested", "saga_id",
        "shown_args", "spec", "store",
    )  # fmt: skip

    def __init__(
        self,
        saga_id: str,
        ref: StepRef,
        spec: ToolSpec,
        args: Mapping[str, Any],
        shown_args: JSONValue,
        decision: RequireApproval,
        clock: Clock,
        store: LogStore,
        log: Callable[[Kind, dict[str, JSONValue], bool], None],
        requested: Callable[[str], None],
        decided: Callable[[str, tuple[str, ...]], None],
    ) -> None:
        self.saga_id, self.ref, self.spec, self.args = saga_id, ref, spec, args
        self.shown_args, self.decision, self.clock, self.store = shown_args, decision, clock, store
        self.log, self.requested, self.decided = log, requested, decided


class StepApprover(Protocol):
    """Gets a human decision for one step (implemented by :class:`~agent_saga.Approvals`)."""

    def approve_step(self, step: ApprovalStep) -> tuple[str, str] | None:
        """Block until the step is approved (``None``) or not (``(rule, reason)`` to refuse)."""
        ...

    def describe(self) -> dict[str, JSONValue]:
        """What the manifest says of this approval set-up."""
        ...


@dataclass(frozen=True)
class Runtime:
    """Store, gate, kill switch, clock, ids, compensators and known tools of one engine.

    ``fast_path``: when true, records of REVERSIBLE steps are buffered and written with the next
    durable record (or the terminal one) instead of being written one by one.

    ``observers``: told of every saga, step, refusal and compensation (see ``observe.py``); the
    one place the engine reads them from. A saga takes a snapshot of them when it starts.
    """

    store: LogStore
    gate: Gate
    kill_switch: KillSwitch
    clock: Clock
    ids: IdSource
    registry: CompensatorRegistry
    tools: ToolRegistry
    fast_path: bool = True
    observers: Observers = field(default_factory=Observers)
    approvals: StepApprover | None = None
    """How calls the gate marks ``RequireApproval`` get a human decision (``None``: refused)."""
