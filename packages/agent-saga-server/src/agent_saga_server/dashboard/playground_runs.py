"""The playground's scripted agents, run without agent-saga ("before") and through the real
engine ("after"), each in a sandbox of its own.

Three scenarios, each a script of tool calls that ends in the harm the visitor's input causes,
acting on the use-case packs' stand-in systems (:mod:`agent_saga_packs.testing`):

* **wire**: a checkout charges the customer the amount, the bank's answer "times out", the
  agent charges again, then wires the amount to the supplier. Alone: a double charge. Through
  the engine (:class:`~agent_saga_packs.payments.PaymentsPack`, :class:`~agent_saga_packs.
  DuplicateWithin` on the bank's own charges, a cap on the wire): the second charge is refused,
  the saga rolls back and the first charge is refunded.
* **dose**: an antiemetic order, then the visitor's paracetamol dose (mg). Alone: the overdose
  is sent to the pharmacy. Through the engine (:class:`~agent_saga_packs.clinical.ClinicalPack`,
  ``order_rules``: at most 1,000 mg a dose): refused, and the first order is cancelled.
* **servo**: the shoulder moves to 30 degrees, then the elbow to the visitor's angle. Alone:
  the elbow goes past its safe limit (and into its end stop past 150 degrees). Through the
  engine (:class:`~agent_saga_packs.robotics.ArmPack`, ``arm_rules``: the elbow within +-90):
  refused, and the shoulder is driven back to its last safe pose.

Invariants: every run gets a new temporary directory (the agent's home and the stand-in's
files), removed when the run ends, whatever happens; inputs are bounded (:data:`BOUNDS`) before
anything runs; no run reaches the network or the dashboard's own home.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_saga import AgentKit, CompensatorRegistry, MaxValue, SagaRolledBack
from agent_saga_packs import DuplicateWithin
from agent_saga_packs.clinical import ClinicalPack, order_rules
from agent_saga_packs.payments import PaymentsPack
from agent_saga_packs.robotics import ArmPack, arm_rules
from agent_saga_packs.testing import LedgerBank, ServoFault, SimulatedServo, SQLiteOrderBook

BOUNDS: dict[str, tuple[float, float]] = {
    "wire": (1, 100_000_000),
    "dose": (0.001, 100_000),
    "servo": (-720, 720),
}
"""Accepted inputs per scenario: cents, milligrams, degrees."""
WIRE_CAP = 5_000_000
DOSE_MAX_MG = 1_000.0
ELBOW_SAFE = (-90.0, 90.0)
END_STOPS = {"shoulder": (-150.0, 150.0), "elbow": (-150.0, 150.0)}
LOG_LINES = 60


@dataclass
class RunResult:
    """What one run left behind: the world's state, how it ended, and its log (after only)."""

    scenario: str
    engine: bool
    outcome: str
    state: dict[str, Any]
    harm: bool
    log: list[dict[str, Any]] = field(default_factory=list)


def check_input(scenario: str, value: float) -> str | None:
    """Why ``value`` cannot be run for ``scenario`` (``None``: it can)."""
    if scenario not in BOUNDS:
        return f"scenario must be one of {', '.join(BOUNDS)}"
    low, high = BOUNDS[scenario]
    if not low <= value <= high:
        return f"the {scenario} input must be between {low:g} and {high:g}"
    if scenario == "wire" and value != int(value):
        return "the wire amount is in whole cents"
    return None


def run(scenario: str, value: float, *, engine: bool) -> RunResult:
    """Run ``scenario`` with ``value`` in a fresh sandbox (removed on return).

    Raises:
        ValueError: an input :func:`check_input` refuses.
    """
    problem = check_input(scenario, value)
    if problem is not None:
        raise ValueError(problem)
    with tempfile.TemporaryDirectory(prefix="agent-saga-playground-") as sandbox:
        return _SCENARIOS[scenario](Path(sandbox), value, engine)


def _kit(sandbox: Path, rules: list[Any]) -> AgentKit:
    return AgentKit(
        home=sandbox / "home", registry=CompensatorRegistry(), rules=rules, checkpoints=False
    )


def _through_engine(
    kit: AgentKit, name: str, script: Callable[[], None]
) -> tuple[str, list[dict[str, Any]]]:
    try:
        with kit.transaction(name):
            script()
        outcome = "committed"
    except SagaRolledBack as failure:
        outcome = f"rolled back: {failure.report.status.value}; {failure}"
    log = [_shown(r) for r in kit.store.records()][:LOG_LINES]
    return outcome, log


def _shown(record: Any) -> dict[str, Any]:
    data = record.data if isinstance(record.data, dict) else {}
    detail = data.get("reason") or data.get("error") or data.get("args") or ""
    return {
        "seq": record.seq,
        "kind": record.kind,
        "tool": str(data.get("tool", "")),
        "detail": str(detail)[:300],
    }


def _wire(sandbox: Path, value: float, engine: bool) -> RunResult:
    amount = int(value)
    bank = LedgerBank(sandbox / "bank.db")
    if not engine:
        for _ in range(2):  # the first answer "timed out": charged again, with a fresh key
            bank.charge("cus_ada", amount, "EUR", idempotency_key=uuid.uuid4().hex)
        bank.wire("supplier", amount, "EUR", "order 7", idempotency_key=uuid.uuid4().hex)
        state = bank.balances()
        return RunResult("wire", False, "finished", state, state["charged:cus_ada"] > amount)
    rules = [
        DuplicateWithin(("customer", "amount"), 3_600, recent=bank.recent_charges,
                        tools="payments.charge", what="charge", name="duplicate_charge"),
        MaxValue(WIRE_CAP, path="amount", tools=frozenset({"payments.wire"})),
    ]  # fmt: skip
    kit = _kit(sandbox, rules)
    try:
        pay = PaymentsPack(kit, bank)

        def script() -> None:
            pay.charge("cus_ada", amount, "EUR")
            pay.charge("cus_ada", amount, "EUR")  # the retry after the "timeout"
            pay.wire("supplier", amount, "EUR", "order 7")

        outcome, log = _through_engine(kit, "checkout", script)
    finally:
        kit.close()
    state = bank.balances()
    return RunResult("wire", True, outcome, state, state.get("charged:cus_ada", 0) > amount, log)


def _dose(sandbox: Path, value: float, engine: bool) -> RunResult:
    book = SQLiteOrderBook(sandbox / "orders.db")
    orders = [("ondansetron", 4.0), ("paracetamol", float(value))]
    if not engine:
        for drug, mg in orders:
            book.place("pt-7", drug, mg, "mg", mg, "oral", idempotency_key=uuid.uuid4().hex)
        state = _orders(book)
        return RunResult("dose", False, "finished", state, value > DOSE_MAX_MG)
    limits = {"ondansetron": (0.5, 8.0), "paracetamol": (1.0, DOSE_MAX_MG)}
    kit = _kit(sandbox, list(order_rules(limits, recent_orders=book.recent_orders)))
    try:
        pack = ClinicalPack(kit, book)

        def script() -> None:
            for drug, mg in orders:
                pack.order("pt-7", drug, mg, "mg")

        outcome, log = _through_engine(kit, "admission orders", script)
    finally:
        kit.close()
    state = _orders(book)
    sent = any(mg > DOSE_MAX_MG for _, _, mg in book.active())
    return RunResult("dose", True, outcome, state, sent, log)


def _orders(book: SQLiteOrderBook) -> dict[str, Any]:
    return {
        "orders sent to the pharmacy": [f"{drug} {mg:g} mg for {who}" for who, drug, mg in
                                        book.active()],
        "cancelled": len(book.cancellations()),
    }  # fmt: skip


def _servo(sandbox: Path, value: float, engine: bool) -> RunResult:
    servo = SimulatedServo(sandbox / "arm.json", end_stops=END_STOPS)
    moves = [("shoulder", 30.0), ("elbow", float(value))]
    if not engine:
        outcome = "finished"
        try:
            for joint, angle in moves:
                servo.move(joint, angle, 60.0, command_id=uuid.uuid4().hex)
        except ServoFault as fault:
            outcome = f"motor fault: {fault}"
        state = _arm(servo)
        return RunResult("servo", False, outcome, state, _past_limit(servo))
    rules = arm_rules({"shoulder": (-90.0, 90.0), "elbow": ELBOW_SAFE}, max_velocity_dps=90.0,
                      read_voltage=servo.voltage)  # fmt: skip
    kit = _kit(sandbox, list(rules))
    try:
        arm = ArmPack(kit, servo)

        def script() -> None:
            for joint, angle in moves:
                arm.move(joint, angle, 60.0)

        outcome, log = _through_engine(kit, "pick and place", script)
    finally:
        kit.close()
    return RunResult("servo", True, outcome, _arm(servo), _past_limit(servo), log)


def _arm(servo: SimulatedServo) -> dict[str, Any]:
    return {
        "joint angles (degrees)": servo.positions(),
        "motor faults": servo.faults(),
        "safe range of the elbow": f"{ELBOW_SAFE[0]:g} to {ELBOW_SAFE[1]:g}",
    }


def _past_limit(servo: SimulatedServo) -> bool:
    low, high = ELBOW_SAFE
    return not low <= servo.positions()["elbow"] <= high or bool(servo.faults())


_SCENARIOS: dict[str, Callable[[Path, float, bool], RunResult]] = {
    "wire": _wire,
    "dose": _dose,
    "servo": _servo,
}

__all__ = ["BOUNDS", "RunResult", "check_input", "run"]
