"""The self-healing loop: refusal reasons go back to the agent, retries back off on the injected
clock, the last refusal goes to a human channel, and every attempt is in the saga's log."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from agent_saga import (
    REVERSIBLE,
    AgentKit,
    ConfigurationError,
    Escalation,
    FakeClock,
    HaltedError,
    Kind,
    Range,
    SagaRolledBack,
    SelfHealingExhausted,
    SelfHealingLoop,
)
from agent_saga.testing import Ledger


def clinic(home: Path, clock: FakeClock, ledger: Ledger) -> tuple[AgentKit, object]:
    kit = AgentKit(
        home=home,
        clock=clock,
        rules=[Range("dose_mg", 0.1, 50, tools="prescribe", unit="mg", name="dose_range")],
    )

    @kit.tool(name="prescribe", semantics=REVERSIBLE)
    def prescribe(patient: str, dose_mg: float) -> str:
        ledger.record("prescribe", str(dose_mg))
        return f"{patient}: {dose_mg} mg"

    return kit, prescribe


class ScriptedAgent:
    """Proposes the next dose from a script and keeps the feedback it was given."""

    def __init__(self, prescribe: object, doses: list[float]) -> None:
        self.prescribe = prescribe
        self.doses = list(doses)
        self.feedback: list[str | None] = []

    def __call__(self, feedback: str | None) -> str:
        self.feedback.append(feedback)
        result: str = self.prescribe("p-7", self.doses.pop(0))  # type: ignore[operator]
        return result


def attempts(kit: AgentKit) -> list[tuple[str, object]]:
    return [
        (str(r.data["outcome"]), r.data.get("rule"))
        for r in kit.store.records()
        if r.kind == Kind.SELFHEAL_ATTEMPT
    ]


def test_the_agent_corrects_its_call_from_the_refusal(home: Path) -> None:
    clock, ledger = FakeClock(), Ledger()
    kit, prescribe = clinic(home, clock, ledger)
    agent = ScriptedAgent(prescribe, [500, 60, 40])
    with kit, kit.transaction("treat"):
        result = SelfHealingLoop(attempts=3, backoff=1.0).run(agent)
    assert result == "p-7: 40 mg"
    assert agent.feedback[0] is None
    assert agent.feedback[1] == (
        "Your call to prescribe was refused by the rule 'dose_range': dose_mg=500 is outside "
        "0.1..50 mg. Change the call so that it satisfies this rule and try again "
        "(attempt 2 of 3)."
    )
    assert "dose_mg=60 is outside" in str(agent.feedback[2])
    assert clock.sleeps == [1.0, 2.0]  # exponential, on the injected clock
    assert ledger.actions() == ["prescribe"]
    with kit:
        assert attempts(kit) == [
            ("refused", "dose_range"),
            ("refused", "dose_range"),
            ("succeeded", None),
        ]


def test_after_the_last_attempt_a_human_is_asked(home: Path) -> None:
    clock, ledger = FakeClock(), Ledger()
    kit, prescribe = clinic(home, clock, ledger)
    inbox: list[Escalation] = []
    loop = SelfHealingLoop(attempts=4, backoff=0.5, factor=3, max_delay=2.0, escalate=inbox.append)
    with kit, pytest.raises(SagaRolledBack) as info, kit.transaction("treat"):
        loop.run(ScriptedAgent(prescribe, [500, 500, 500, 500]))
    exhausted = info.value.cause
    assert isinstance(exhausted, SelfHealingExhausted)
    assert exhausted.rule == "dose_range"
    assert "still refused after 4 attempts" in exhausted.reason
    assert clock.sleeps == [0.5, 1.5, 2.0]  # capped, and no wait after the last attempt
    assert len(inbox) == 1
    assert [r.attempt for r in inbox[0].refusals] == [1, 2, 3, 4]
    assert inbox[0].summary().endswith("after 4 attempts: dose_mg=500 is outside 0.1..50 mg")
    assert ledger.count("prescribe") == 0
    with kit:
        escalated = [r for r in kit.store.records() if r.kind == Kind.SELFHEAL_ESCALATED]
        assert len(escalated) == 1
        assert escalated[0].data["channel"] == "called"
        assert len(attempts(kit)) == 4


def test_a_failing_channel_is_recorded(home: Path) -> None:
    clock, ledger = FakeClock(), Ledger()
    kit, prescribe = clinic(home, clock, ledger)

    def pager(escalation: Escalation) -> None:
        raise ConnectionError("pager down")

    with kit, kit.transaction("t"):
        with pytest.raises(SelfHealingExhausted) as info:
            SelfHealingLoop(attempts=1, escalate=pager).run(ScriptedAgent(prescribe, [900]))
        assert info.value.channel_error == "ConnectionError: pager down"
    assert clock.sleeps == []


def test_a_halt_is_not_retried(home: Path) -> None:
    clock, ledger = FakeClock(), Ledger()
    kit, prescribe = clinic(home, clock, ledger)
    agent = ScriptedAgent(prescribe, [5, 5])
    with kit, pytest.raises(SagaRolledBack) as info, kit.transaction("t"):
        kit.halt("incident")
        SelfHealingLoop().run(agent)
    assert isinstance(info.value.cause, HaltedError)
    assert len(agent.feedback) == 1
    assert clock.sleeps == []


def test_outside_a_transaction_is_a_configuration_error(home: Path) -> None:
    with pytest.raises(ConfigurationError, match="inside a transaction"):
        SelfHealingLoop().run(lambda feedback: None)
    with pytest.raises(ConfigurationError):
        SelfHealingLoop(attempts=0)


def test_async_steps(home: Path) -> None:
    clock, ledger = FakeClock(), Ledger()
    kit = AgentKit(home=home, clock=clock, rules=[Range("speed", 0, 2, name="speed_limit")])

    @kit.tool(name="rover.drive", semantics=REVERSIBLE)
    async def drive(speed: float) -> float:
        ledger.record("drive")
        return speed

    speeds = [9.0, 1.5]

    async def step(feedback: str | None) -> float:
        return await drive(speeds.pop(0))

    async def main() -> float:
        async with kit.transaction("drive"):
            return await SelfHealingLoop(backoff=0.25).arun(step)

    with kit:
        assert asyncio.run(main()) == 1.5
    assert clock.sleeps == [0.25]
    assert ledger.count("drive") == 1
