"""Robot arms: joint and speed bounds, a battery check, a command rate limit, undo by going back.

* ``arm.move(joint, angle_deg, velocity_dps)`` is COMPENSABLE: its compensation
  ``arm.return_to_safe_pose`` drives the joint back to the angle it had before the move (the
  last pose the gate had let it reach), at a slow, safe speed, with its own command id. Its
  probe asks the controller whether the command with the step's key was executed.
* :func:`arm_rules` uses the core's ``Range`` for the speed and ``RateLimit`` for motor
  commands; two rules are new: :class:`JointRange` (limits that differ per joint, which one
  ``Range`` over one argument cannot express) and :class:`SensorRange` (a live reading such as
  the battery voltage, taken when the call is gated, which is not an argument of the call).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from agent_saga import COMPENSABLE, Allow, Decision, Deny, Range, RateLimit, Rule, ToolCall

from ._declare import Declarer
from ._scope import describe_scope, finite_number, in_scope, tool_scope

if TYPE_CHECKING:
    from agent_saga import AgentKit


class Servo(Protocol):
    """What the pack needs from the arm's controller. ``move`` is idempotent on ``command_id``."""

    def move(
        self, joint: str, angle_deg: float, velocity_dps: float, *, command_id: str
    ) -> Mapping[str, Any]:
        """Returns at least ``joint``, ``from_deg`` and ``to_deg``."""
        ...

    def find_command(self, command_id: str) -> Mapping[str, Any] | None: ...

    def voltage(self) -> float: ...


class ArmPack:
    """The motion tool, declared on ``kit`` (or process-wide when ``kit`` is ``None``).

    Args:
        servo: the controller.
        safe_velocity_dps: the speed of the return to the last safe pose.
        prefix: the tools' name prefix (``arm.move``).
    """

    def __init__(
        self,
        kit: AgentKit | None,
        servo: Servo,
        *,
        safe_velocity_dps: float = 30.0,
        prefix: str = "arm",
    ) -> None:
        if not finite_number(safe_velocity_dps) or safe_velocity_dps <= 0:
            raise ValueError(f"safe_velocity_dps must be positive, got {safe_velocity_dps!r}")
        self.servo = servo
        self.safe_velocity_dps = safe_velocity_dps
        declare = Declarer(kit, prefix)
        self.tool_names = {"move": declare.name("move")}
        declare.compensator("return_to_safe_pose", self._return_to_safe_pose)
        self.move: Callable[..., dict[str, Any]] = declare.tool(
            self._move, "move", COMPENSABLE, compensate="return_to_safe_pose", probe=self._landed
        )

    def _move(
        self, joint: str, angle_deg: float, velocity_dps: float, *, idempotency_key: str
    ) -> dict[str, Any]:
        """Move ``joint`` to ``angle_deg`` degrees at ``velocity_dps`` degrees per second."""
        return dict(self.servo.move(joint, angle_deg, velocity_dps, command_id=idempotency_key))

    def _landed(self, idempotency_key: str) -> dict[str, Any] | bool:
        found = self.servo.find_command(idempotency_key)
        return False if found is None else dict(found)

    def _return_to_safe_pose(self, result: Mapping[str, Any], idempotency_key: str) -> None:
        self.servo.move(
            str(result["joint"]),
            float(result["from_deg"]),
            self.safe_velocity_dps,
            command_id=idempotency_key,
        )


class JointRange:
    """Refuse a move whose angle is outside its joint's limits (an unknown joint is refused).

    ``JointRange({"shoulder": (-90, 90), "elbow": (0, 135)}, tools="arm.move")``.
    """

    kind = "rule"

    def __init__(
        self,
        limits: Mapping[str, tuple[float, float]],
        *,
        tools: Iterable[str] | str | None = "arm.move",
        joint: str = "joint",
        angle: str = "angle_deg",
        unit: str = "deg",
        name: str = "joint_limits",
    ) -> None:
        self.limits: dict[str, tuple[float, float]] = {}
        for key, (low, high) in limits.items():
            if not (finite_number(low) and finite_number(high)) or low > high:
                raise ValueError(f"joint {key!r}: limits {low!r}..{high!r} are not a range")
            self.limits[key] = (float(low), float(high))
        self.tools = tool_scope(tools)
        self.joint, self.angle, self.unit, self.name = joint, angle, unit, name

    def evaluate(self, call: ToolCall) -> Decision:
        if not in_scope(self.tools, call.tool):
            return Allow()
        joint, angle = call.arg(self.joint), call.arg(self.angle)
        if not isinstance(joint, str) or joint not in self.limits:
            return Deny(self.name, f"{self.joint}={joint!r} is not one of {sorted(self.limits)}")
        low, high = self.limits[joint]
        if not finite_number(angle):
            return Deny(self.name, f"{joint}: {self.angle}={angle!r} is not a finite number")
        if not low <= angle <= high:
            return Deny(
                self.name,
                f"{joint}: {self.angle}={angle!r} is outside {low:g}..{high:g} {self.unit}",
            )
        return Allow()

    def describe(self) -> str:
        bounds = ", ".join(f"{j} {lo:g}..{hi:g}" for j, (lo, hi) in sorted(self.limits.items()))
        return f"{self.angle} per joint ({bounds} {self.unit}) on {describe_scope(self.tools)}"


class SensorRange:
    """Refuse calls while a live reading is outside ``[low, high]`` (read when gated).

    ``SensorRange(servo.voltage, 22.0, 29.4, unit="V", tools="arm.move", name="battery")``.
    A reading that raises, or is not a finite number, refuses the call (fail closed).
    """

    kind = "rule"

    def __init__(
        self,
        read: Callable[[], float],
        low: float,
        high: float,
        *,
        tools: Iterable[str] | str | None = None,
        unit: str = "",
        name: str = "sensor_range",
    ) -> None:
        if not (finite_number(low) and finite_number(high)) or low > high:
            raise ValueError(f"SensorRange bounds {low!r}..{high!r} are not a range")
        self.read, self.low, self.high = read, float(low), float(high)
        self.tools = tool_scope(tools)
        self.unit = f" {unit}" if unit else ""
        self.name = name

    def evaluate(self, call: ToolCall) -> Decision:
        if not in_scope(self.tools, call.tool):
            return Allow()
        reading: object = self.read()
        if not finite_number(reading):
            return Deny(self.name, f"{self.name} reads {reading!r}, not a finite number")
        value = float(reading)  # type: ignore[arg-type]
        if not self.low <= value <= self.high:
            return Deny(
                self.name,
                f"{self.name} reads {value:g}{self.unit}, outside "
                f"{self.low:g}..{self.high:g}{self.unit}",
            )
        return Allow()

    def describe(self) -> str:
        return (
            f"{self.name} reading within {self.low:g}..{self.high:g}{self.unit} "
            f"on {describe_scope(self.tools)}"
        )


def arm_rules(
    joints: Mapping[str, tuple[float, float]],
    *,
    max_velocity_dps: float,
    read_voltage: Callable[[], float],
    battery_v: tuple[float, float] = (22.0, 29.4),
    commands: int = 10,
    per_seconds: float = 1.0,
    monotonic: Callable[[], float] = time.monotonic,
    tool: str = "arm.move",
) -> list[Rule]:
    """Per-joint angle limits, a speed range (``Range``), the battery voltage (read live) and
    at most ``commands`` motor commands per ``per_seconds`` (``RateLimit``) for ``tool``."""
    low_v, high_v = battery_v
    return [
        JointRange(joints, tools=tool),
        Range("velocity_dps", 0.1, max_velocity_dps, tools=tool, unit="deg/s", name="velocity"),
        SensorRange(read_voltage, low_v, high_v, tools=tool, unit="V", name="battery"),
        RateLimit(
            commands, per_seconds, tools=tool, per="all", monotonic=monotonic, name="motor_rate"
        ),
    ]


__all__ = ["ArmPack", "JointRange", "SensorRange", "Servo", "arm_rules"]
