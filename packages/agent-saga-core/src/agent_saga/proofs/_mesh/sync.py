"""A device's side of a sync through files: give its log to the mesh, learn what the fleet did.

A sync merges the device's home into a mesh directory (a shared folder, a USB stick, a copy
fetched from elsewhere), then reads the merged view and appends a durable ``mesh.seen`` record
to the device's own log: the last record of every other origin it has now seen (by ``seq`` and
hash). That record is how the merged order knows what the device knew (see :mod:`.clock`) and
how certify tells an effect made after a fleet halt the device had seen from one it had not.
When the merged view ends halted (its latest ``control.halt`` or ``control.resume`` is a halt),
the device's own kill switch is engaged, so its next effect is refused; it is never released by
a sync (``agent-saga resume`` on the device does that).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..._clock import Clock
from ..._gate.killswitch import KillSwitch
from ..._log.codec import JSONValue
from ..._log.records import Entry, Kind
from ..._log.store import LogStore
from .clock import MeshRecord
from .merge import MergeReport, merge_logs
from .origin import read_origin
from .view import MeshView, merged_view

__all__ = ["SyncReport", "fleet_halt", "sync_home"]


@dataclass(frozen=True)
class SyncReport:
    """What a sync merged, what the device has now seen, and whether the fleet is halted."""

    merge: MergeReport
    seen: dict[str, int]
    """Origin name -> records of it the device has now seen (other origins only)."""
    fleet_halt: str | None
    """The reason of the fleet halt in force in the merged view (the device is now halted)."""


def fleet_halt(view: MeshView) -> MeshRecord | None:
    """The halt in force at the end of the merged view, if any."""
    state: MeshRecord | None = None
    for item in view.records:
        if item.record.kind == Kind.HALT:
            state = item
        elif item.record.kind == Kind.RESUME:
            state = None
    return state


def sync_home(
    directory: str | os.PathLike[str],
    *,
    home: Path,
    store: LogStore,
    kill_switch: KillSwitch,
    clock: Clock,
    key: bytes | None = None,
) -> SyncReport:
    """Merge ``home`` into the mesh at ``directory`` and record what the device saw there.

    ``store`` is the device's open log (the ``mesh.seen`` record is appended to it, durably);
    its records must already be covered by a checkpoint to be merged.

    Raises:
        ConfigurationError: the home has no checkpoint key, or ``directory`` is not a mesh.
    """
    report = merge_logs(directory, [home], key=key)
    view = merged_view(directory, key=key)
    own = read_origin(home).id
    frontier: dict[str, JSONValue] = {
        origin_id: {"seq": seq, "hash": digest}
        for origin_id, (seq, digest) in sorted(view.tips().items())
        if origin_id != own
    }
    data: dict[str, JSONValue] = {"mesh": str(directory), "frontier": frontier}
    halt = fleet_halt(view)
    reason = None
    if halt is not None:
        reason = str(halt.record.data.get("reason", ""))
        data["fleet_halt"] = {"origin": halt.origin, "seq": halt.record.seq, "reason": reason}
    entry = Entry(Kind.MESH_SEEN.value, None, data, int(clock.now() * 1000))
    store.append([entry], sync=True)
    if halt is not None and not kill_switch.state().halted:
        kill_switch.halt(f"fleet halt (origin {halt.origin}): {reason}", at=clock.now())
    seen = {view.origins[origin_id]: view.sizes[origin_id] for origin_id in frontier}
    return SyncReport(report, seen, reason)
