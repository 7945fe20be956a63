"""The parts an engine runs on, injected so nothing in a saga reaches for globals."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .._clock import Clock, IdSource
from .._gate.decisions import Gate
from .._gate.killswitch import KillSwitch
from .._log.store import LogStore
from .compensation import CompensatorRegistry
from .observe import Observers
from .semantics import ToolRegistry

if TYPE_CHECKING:
    from .._approvals.channel import Approvals


@dataclass(frozen=True)
class Runtime:
    """Store, gate, kill switch, clock, ids, compensators and known tools of one engine.

    ``fast_path``: when true, records of REVERSIBLE steps are buffered and written with the next
    durable record (or the terminal one) instead of being written one by one.

    ``observers``: told of every saga, step, refusal and compensation (see ``_observe.py``); the
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
    approvals: Approvals | None = None
    """How calls the gate marks ``RequireApproval`` get a human decision (``None``: refused)."""
