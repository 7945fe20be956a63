"""Shared fixtures: an own home per test, the example diagrams, one real run of the trip
example's generated code (in a subprocess, as a user runs it) with bodies bound to it, and one
recorded saga with a refusal, an approval and a rollback."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from agent_saga import (
    AgentKit,
    Approvals,
    GateRefused,
    MaxValue,
    SagaRolledBack,
    read_log,
    submit_vote,
)
from agent_saga_bpmn import codegen, parse_flow

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
TRIP = EXAMPLES / "trip.bpmn"
SUPPLIER = EXAMPLES / "supplier-payment.bpmn"

CARD = "4242 4242 4242 4242"
"""The card number the trip is run with; redacted, it never reaches the log."""
TRIP_BODIES = {
    "flights.book": 'ledger("book flight")\n    return {"booking": "FL-1"}',
    "hotels.book": 'ledger("book hotel")\n    return {"booking": "HT-2"}',
    "payments.charge": 'ledger("charge card " + card["number"][-4:])\n'
    '    raise RuntimeError("card declined")',
    "flights.cancel": 'ledger("cancel " + result["booking"])',
    "hotels.cancel": 'ledger("cancel " + result["booking"])',
    "payments.refund": 'ledger("refund")',
}
"""Real bodies for the trip's stubs: the last task fails, so the two before it are undone."""

RUNNER = """

def ledger(line: str) -> None:
    with open("ledger.txt", "a", encoding="utf-8") as out:
        out.write(line + "\\n")


if __name__ == "__main__":
    from agent_saga import SagaRolledBack

    try:
        {call}
    except SagaRolledBack as rolled:
        print("rolled back:", rolled.cause)
"""


@pytest.fixture(autouse=True)
def _own_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An own home under the test's temporary directory (the repository's conftest has cleared
    the shell's agent-saga and terminal settings for the session)."""
    monkeypatch.setenv("AGENT_SAGA_HOME", str(tmp_path / "home"))


def bind(source: str, bodies: dict[str, str]) -> str:
    """``source`` (generated code) with each stub's ``raise NotImplementedError("name")``
    replaced by ``bodies[name]``; every stub must be bound."""
    for name, body in bodies.items():
        stub = f'    raise NotImplementedError("{name}")'
        assert source.count(stub) == 1, name
        source = source.replace(stub, f"    {body}")
    assert "NotImplementedError(" not in source
    return source


@dataclass(frozen=True)
class Run:
    """A finished run of generated code: its home, what its bodies did, what it printed."""

    home: Path
    ledger: list[str]
    stdout: str

    def records(self) -> list[dict[str, Any]]:
        return [record.to_json() for record in read_log(self.home)]


def run_generated(
    directory: Path, source: str, call: str, env: dict[str, str] | None = None
) -> Run:
    """Run ``source`` as a script in ``directory`` (its own home there, and ``env`` added to
    the environment), then ``call``."""
    script = directory / "bound_flow.py"
    script.write_text(source + RUNNER.replace("{call}", call), encoding="utf-8")
    env = {**os.environ, "AGENT_SAGA_HOME": str(directory / "home"), **(env or {})}
    done = subprocess.run(
        [sys.executable, str(script)], cwd=directory, env=env, capture_output=True,
        text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    ledger = directory / "ledger.txt"
    lines = ledger.read_text(encoding="utf-8").splitlines() if ledger.exists() else []
    return Run(directory / "home", lines, done.stdout)


TripRunner = Callable[[Path, dict[str, str]], Run]


@pytest.fixture
def run_trip() -> TripRunner:
    """Runs the trip example, generated and bound to :data:`TRIP_BODIES`, in a directory with
    more environment (a store on PostgreSQL, say)."""

    def run(directory: Path, env: dict[str, str]) -> Run:
        source = bind(codegen(parse_flow(TRIP.read_bytes()), "trip"), TRIP_BODIES)
        call = f"run_book_a_trip(card={{'number': '{CARD}'}})"
        return run_generated(directory, source, call, env)

    return run


@pytest.fixture(scope="session")
def trip_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The trip example, generated, bound to :data:`TRIP_BODIES` and run once."""
    directory = tmp_path_factory.mktemp("trip-run")
    source = bind(codegen(parse_flow(TRIP.read_bytes()), "trip"), TRIP_BODIES)
    return run_generated(directory, source, f"run_book_a_trip(card={{'number': '{CARD}'}})")


class ApproveWhenPosted:
    """An approval channel whose human approves shortly after each request is posted."""

    def __init__(self) -> None:
        self.kit: AgentKit | None = None

    def request_posted(self, request: Any) -> None:
        kit = self.kit
        assert kit is not None
        threading.Timer(
            0.02, lambda: submit_vote(kit.store, request.id, "alice", "approve", channel="test")
        ).start()

    def request_decided(self, request: Any, decision: str) -> None:
        pass


@pytest.fixture(scope="session")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """One saga's records: a step, a refused call, a step, an approved wire, then a failure
    that rolls back the two compensable steps (newest first); the wire cannot be undone, so the
    saga ends needing a human."""
    home = tmp_path_factory.mktemp("recorded") / "home"
    channel = ApproveWhenPosted()
    kit = AgentKit(
        home=home,
        rules=[MaxValue(100, path="amount", tools=frozenset({"pay.charge"}))],
        approvals=Approvals(approvers=["alice"], channels=[channel], poll=0.01),
    )
    channel.kit = kit

    @kit.compensator("stock.release")
    def release(result: Any) -> None:
        pass

    @kit.compensator("pay.refund")
    def refund(result: Any) -> None:
        pass

    @kit.tool(name="stock.reserve", compensate="stock.release")
    def reserve(sku: str) -> str:
        return f"hold-{sku}"

    @kit.tool(name="pay.charge", compensate="pay.refund")
    def charge(amount: int) -> str:
        return f"ch-{amount}"

    @kit.tool(name="bank.wire")  # IRREVERSIBLE: waits for alice
    def wire(amount: int) -> str:
        return "wired"

    with pytest.raises(SagaRolledBack), kit.transaction("checkout"):
        reserve("sku-1")
        with pytest.raises(GateRefused):
            charge(10_000)
        charge(50)
        wire(50)
        raise RuntimeError("courier <lost> & \x07 gone")
    kit.close()
    return [record.to_json() for record in read_log(home)]
