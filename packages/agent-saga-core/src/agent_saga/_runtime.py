"""The parts an engine runs on, injected so nothing in a saga reaches for globals."""

from __future__ import annotations

from dataclasses import dataclass

from ._clock import Clock, IdSource
from ._compensation import CompensatorRegistry
from ._gate import Gate
from ._killswitch import KillSwitch
from ._semantics import ToolRegistry
from ._store import LogStore


@dataclass(frozen=True)
class Runtime:
    """Store, gate, kill switch, clock, ids, compensators and known tools of one engine.

    ``fast_path``: when true, records of REVERSIBLE steps are buffered and written with the next
    durable record (or the terminal one) instead of being written one by one.
    """

    store: LogStore
    gate: Gate
    kill_switch: KillSwitch
    clock: Clock
    ids: IdSource
    registry: CompensatorRegistry
    tools: ToolRegistry
    fast_path: bool = True
