"""A simulated servo arm with physical limits, its state in a file shared across processes.

It behaves as a hobby or industrial servo controller does: each joint has mechanical end
stops, the motor a top speed, the controller a brown-out voltage. A command past an end stop
drives the joint into the stop and faults; a command faster than the motor can go, or on a
battery below brown-out, faults without moving; an obstacle stalls the joint. Commands carry
an id, and the controller ignores an id it has already executed (it returns the first
outcome), as controllers with sequence numbers do.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any


class ServoFault(Exception):
    """The controller refused or aborted a command (end stop, speed, brown-out, stall)."""


class SimulatedServo:
    """A multi-joint arm whose state lives in ``path`` (JSON, updated atomically under a lock).

    Args:
        path: the state file (created at the home pose, every joint at 0 degrees).
        end_stops: mechanical limits per joint, in degrees.
        max_velocity: the motor's top speed, degrees per second.
        battery_v: the battery voltage at start.
        brownout_v: below this the controller faults every command.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        end_stops: Mapping[str, tuple[float, float]],
        max_velocity: float = 240.0,
        battery_v: float = 24.8,
        brownout_v: float = 20.0,
    ) -> None:
        self.path = Path(path)
        self.end_stops = {joint: (float(lo), float(hi)) for joint, (lo, hi) in end_stops.items()}
        self.max_velocity = max_velocity
        self.brownout_v = brownout_v
        self._lock_path = self.path.with_name(self.path.name + ".lock")
        self._initial = {
            "joints": dict.fromkeys(self.end_stops, 0.0),
            "battery_v": battery_v,
            "commands": [],
            "stalled": [],
            "faults": [],
        }
        if not self.path.exists():
            self.reset()

    # -- the controller ------------------------------------------------------------------------

    def move(
        self, joint: str, angle_deg: float, velocity_dps: float, *, command_id: str
    ) -> dict[str, Any]:
        """Move ``joint`` to ``angle_deg`` at ``velocity_dps``; returns the executed command.

        Raises:
            ServoFault: unknown joint, speed above the motor's, brown-out, a stalled joint, or
                an angle past an end stop (then the joint stops at the end stop).
        """
        with self._state() as state:
            for done in state["commands"]:
                if done["command_id"] == command_id:
                    return dict(done)
            if joint not in self.end_stops:
                raise ServoFault(f"{joint}: no such joint")
            if state["battery_v"] < self.brownout_v:
                raise ServoFault(f"brown-out: battery at {state['battery_v']} V")
            if not 0 < velocity_dps <= self.max_velocity:
                raise ServoFault(f"{joint}: {velocity_dps} deg/s is beyond the motor")
            if joint in state["stalled"]:
                state["stalled"].remove(joint)
                raise ServoFault(f"{joint}: stalled against an obstacle")
            low, high = self.end_stops[joint]
            start = state["joints"][joint]
            if not low <= angle_deg <= high:
                stop = high if angle_deg > high else low
                state["joints"][joint] = stop
                state["faults"].append(f"{joint} hit its end stop at {stop:g} deg")
                raise ServoFault(f"{joint}: {angle_deg:g} deg is past the end stop at {stop:g} deg")
            state["joints"][joint] = float(angle_deg)
            command = {
                "command_id": command_id,
                "joint": joint,
                "from_deg": start,
                "to_deg": float(angle_deg),
                "velocity_dps": float(velocity_dps),
            }
            state["commands"].append(command)
            return dict(command)

    def find_command(self, command_id: str) -> dict[str, Any] | None:
        """The command executed with this id, or ``None``."""
        state = self._read()
        return next((dict(c) for c in state["commands"] if c["command_id"] == command_id), None)

    def positions(self) -> dict[str, float]:
        return dict(self._read()["joints"])

    def voltage(self) -> float:
        return float(self._read()["battery_v"])

    def commands(self) -> list[dict[str, Any]]:
        return [dict(c) for c in self._read()["commands"]]

    def faults(self) -> list[str]:
        return list(self._read()["faults"])

    # -- the simulation's knobs ----------------------------------------------------------------

    def set_voltage(self, volts: float) -> None:
        with self._state() as state:
            state["battery_v"] = volts

    def stall(self, joint: str) -> None:
        """Put an obstacle in ``joint``'s way: its next move faults."""
        with self._state() as state:
            state["stalled"].append(joint)

    def reset(self) -> None:
        """Back to the home pose, a full battery, no history."""
        with self._state(fresh=True) as state:
            state.clear()
            state.update(json.loads(json.dumps(self._initial)))

    # -- the state file ------------------------------------------------------------------------

    def _read(self) -> dict[str, Any]:
        with self._locked():
            return dict(json.loads(self.path.read_text()))

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock_path.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    @contextmanager
    def _state(self, *, fresh: bool = False) -> Iterator[dict[str, Any]]:
        """The state under the lock; written back (atomically) when the block ends, even when
        it raises: a fault changes the state too (a joint at its end stop)."""
        with self._locked():
            state: dict[str, Any] = {} if fresh else json.loads(self.path.read_text())
            try:
                yield state
            finally:
                scratch = self.path.with_name(self.path.name + ".tmp")
                scratch.write_text(json.dumps(state, sort_keys=True))
                os.replace(scratch, self.path)
