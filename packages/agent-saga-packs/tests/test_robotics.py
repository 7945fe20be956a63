"""The robotics pack against the simulated servo (physical end stops, top speed, brown-out)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from agent_saga import AgentKit, CompensatorRegistry, GateRefused, SagaRolledBack, SagaStatus
from agent_saga_packs.robotics import ArmPack, JointRange, SensorRange, arm_rules
from agent_saga_packs.testing import ServoFault, SimulatedServo
from pytest_agent_saga import ChaosRunner

if TYPE_CHECKING:
    from pathlib import Path

END_STOPS = {"shoulder": (-120.0, 120.0), "elbow": (-135.0, 135.0), "wrist": (-180.0, 180.0)}
SOFT_LIMITS = {"shoulder": (-90.0, 90.0), "elbow": (0.0, 120.0), "wrist": (-170.0, 170.0)}


class Ticks:
    """A monotonic clock the test moves by hand (for the rate limit)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def servo(tmp_path: Path) -> SimulatedServo:
    return SimulatedServo(tmp_path / "servo.json", end_stops=END_STOPS, max_velocity=240)


@pytest.fixture
def ticks() -> Ticks:
    return Ticks()


@pytest.fixture
def arm(tmp_path: Path, servo: SimulatedServo, ticks: Ticks) -> tuple[AgentKit, ArmPack]:
    rules = arm_rules(
        SOFT_LIMITS, max_velocity_dps=120, read_voltage=servo.voltage, commands=3, monotonic=ticks
    )
    kit = AgentKit(home=tmp_path / "agent", registry=CompensatorRegistry(), rules=rules)
    return kit, ArmPack(kit, servo, safe_velocity_dps=20)


def test_the_servo_has_physical_limits(servo: SimulatedServo) -> None:
    with pytest.raises(ServoFault, match="shoulder: 150 deg is past the end stop at 120 deg"):
        servo.move("shoulder", 150, 60, command_id="c1")
    assert servo.positions()["shoulder"] == 120.0  # driven into the stop
    assert servo.faults() == ["shoulder hit its end stop at 120 deg"]
    with pytest.raises(ServoFault, match="beyond the motor"):
        servo.move("elbow", 10, 500, command_id="c2")
    servo.set_voltage(19.5)
    with pytest.raises(ServoFault, match="brown-out"):
        servo.move("elbow", 10, 60, command_id="c3")
    assert servo.commands() == []
    servo.set_voltage(24.0)
    first = servo.move("elbow", 10, 60, command_id="c4")
    assert servo.move("elbow", 99, 60, command_id="c4") == first  # a command id runs once
    assert servo.positions()["elbow"] == 10.0


def test_the_gate_stops_what_the_servo_would_fault_on(
    arm: tuple[AgentKit, ArmPack], servo: SimulatedServo
) -> None:
    kit, pack = arm
    with kit, kit.transaction("reach"):
        pack.move("shoulder", 45, 60)
        refusals = []
        for joint, angle, speed in [("shoulder", 150, 60), ("elbow", -10, 60), ("tail", 0, 60),
                                    ("elbow", 30, 500), ("elbow", 30, 0)]:  # fmt: skip
            with pytest.raises(GateRefused) as refused:
                pack.move(joint, angle, speed)
            refusals.append((refused.value.rule, refused.value.reason))
    assert refusals == [
        ("joint_limits", "shoulder: angle_deg=150 is outside -90..90 deg"),
        ("joint_limits", "elbow: angle_deg=-10 is outside 0..120 deg"),
        ("joint_limits", "joint='tail' is not one of ['elbow', 'shoulder', 'wrist']"),
        ("velocity", "velocity_dps=500 is outside 0.1..120 deg/s"),
        ("velocity", "velocity_dps=0 is outside 0.1..120 deg/s"),
    ]
    assert servo.faults() == []
    assert servo.positions() == {"shoulder": 45.0, "elbow": 0.0, "wrist": 0.0}


def test_a_low_battery_stops_motion(arm: tuple[AgentKit, ArmPack], servo: SimulatedServo) -> None:
    kit, pack = arm
    servo.set_voltage(21.4)
    with kit, kit.transaction("reach"), pytest.raises(GateRefused) as refused:
        pack.move("shoulder", 45, 60)
    assert (refused.value.rule, refused.value.reason) == (
        "battery",
        "battery reads 21.4 V, outside 22..29.4 V",
    )
    assert servo.commands() == []


def test_bounds_that_are_not_a_range_are_refused_when_declared() -> None:
    with pytest.raises(ValueError, match="not a range"):
        SensorRange(lambda: 24.0, 30, 20)
    with pytest.raises(ValueError, match="not a range"):
        JointRange({"elbow": (10, 0)})


def test_motor_commands_are_rate_limited(
    arm: tuple[AgentKit, ArmPack], servo: SimulatedServo, ticks: Ticks
) -> None:
    kit, pack = arm
    with kit, kit.transaction("jitter"):
        for angle in (10, 20, 30):
            pack.move("wrist", angle, 100)
        with pytest.raises(GateRefused) as refused:
            pack.move("wrist", 40, 100)
        ticks.now += 1.5
        pack.move("wrist", 40, 100)
    assert refused.value.rule == "motor_rate"
    assert [c["to_deg"] for c in servo.commands()] == [10.0, 20.0, 30.0, 40.0]


def test_an_unreadable_battery_refuses_the_move(tmp_path: Path, servo: SimulatedServo) -> None:
    def unreadable() -> float:
        raise OSError("I2C bus timeout")

    rules = arm_rules(SOFT_LIMITS, max_velocity_dps=120, read_voltage=unreadable)
    with AgentKit(home=tmp_path / "a", registry=CompensatorRegistry(), rules=rules) as kit:
        pack = ArmPack(kit, servo)
        with kit.transaction("t"), pytest.raises(GateRefused, match="I2C bus timeout"):
            pack.move("elbow", 10, 60)
    assert servo.commands() == []


def test_a_stall_returns_each_joint_to_its_last_safe_pose_newest_first(
    arm: tuple[AgentKit, ArmPack], servo: SimulatedServo, ticks: Ticks
) -> None:
    kit, pack = arm
    ticks.now = 0.0
    servo.move("wrist", 15, 60, command_id="setup")  # where the arm starts
    with kit, pytest.raises(SagaRolledBack) as failed, kit.transaction("pick"):
        pack.move("shoulder", 30, 60)
        pack.move("elbow", 90, 60)
        pack.move("wrist", -45, 90)
        ticks.now += 1.5  # within the rate limit
        servo.stall("shoulder")
        pack.move("shoulder", 60, 60)
    assert failed.value.report.status is SagaStatus.ROLLED_BACK
    assert isinstance(failed.value.cause, ServoFault)
    moves = [(c["joint"], c["to_deg"], c["velocity_dps"]) for c in servo.commands()]
    assert moves == [
        ("wrist", 15.0, 60.0),
        ("shoulder", 30.0, 60.0),
        ("elbow", 90.0, 60.0),
        ("wrist", -45.0, 90.0),
        # undone newest first, slowly, each joint back where it was before its move
        ("wrist", 15.0, 20.0),
        ("elbow", 0.0, 20.0),
        ("shoulder", 0.0, 20.0),
    ]
    assert servo.positions() == {"shoulder": 0.0, "elbow": 0.0, "wrist": 15.0}


def test_the_manifest_lists_core_and_pack_rules(arm: tuple[AgentKit, ArmPack]) -> None:
    kit, _ = arm
    with kit:
        rules = {r["name"]: (r["type"], r["describes"]) for r in kit.guarantees()["gate"]["rules"]}
    assert rules == {
        "joint_limits": (
            "JointRange",
            "angle_deg per joint (elbow 0..120, shoulder -90..90, wrist -170..170 deg) on arm.move",
        ),
        "velocity": ("Range", "velocity_dps in 0.1..120 deg/s on arm.move"),
        "battery": ("SensorRange", "battery reading within 22..29.4 V on arm.move"),
        "motor_rate": ("RateLimit", "at most 3 calls per 1 s per all on arm.move"),
    }


def test_every_fault_point_of_a_pick(
    servo: SimulatedServo, saga_kit: AgentKit, saga_chaos: ChaosRunner
) -> None:
    pack = ArmPack(saga_kit, servo)

    def pick() -> None:
        pack.move("shoulder", 30, 60)
        pack.move("elbow", 90, 60)
        pack.move("wrist", -45, 90)

    report = saga_chaos.run(pick, world=servo.positions, reset=servo.reset, name="pick")
    assert {point.kind for point in report.results} == {
        "exception",
        "compensation",
        "kill",
        "duplicate",
    }
    assert report.ok


def test_a_joint_that_cannot_go_back_waits_for_a_human(
    arm: tuple[AgentKit, ArmPack], servo: SimulatedServo
) -> None:
    kit, pack = arm
    with kit, pytest.raises(SagaRolledBack) as failed, kit.transaction("pick"):
        pack.move("elbow", 90, 60)
        servo.stall("elbow")  # an obstacle now blocks the way back
        raise RuntimeError("gripper lost the part")
    report = failed.value.report
    assert report.status is SagaStatus.NEEDS_HUMAN
    assert report.failed[0].error == "ServoFault: elbow: stalled against an obstacle"
    assert servo.positions()["elbow"] == 90.0
