"""Predictive pre-execution: a REVERSIBLE step runs ahead of confirmation under a lease; the
confirmed call gets its result once, and nothing else ever does."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from agent_saga import (
    COMPENSABLE,
    IRREVERSIBLE,
    REVERSIBLE,
    AgentKit,
    ConfigurationError,
    DenyTools,
    FakeClock,
    GateRefused,
    PendingCall,
    SagaRolledBack,
    SequentialIds,
    StepRef,
    ToolCallGuard,
    build_history,
)
from agent_saga._engine.speculation.keys import FileLeaseKeys
from agent_saga._errors import SpeculationError
from agent_saga._log.records import Kind
from agent_saga.cli import main
from click.testing import CliRunner


class Lookup:
    """A slow price lookup (REVERSIBLE: it reads), with a draft it can undo, and counters."""

    def __init__(self, kit: AgentKit) -> None:
        self.calls: list[str] = []
        self.undone: list[str] = []

        def forget(sku: str) -> None:
            self.undone.append(sku)

        @kit.tool(name="prices.lookup", semantics=REVERSIBLE, compensate=forget)
        def lookup(sku: str, qty: int = 1) -> dict[str, Any]:
            self.calls.append(sku)
            return {"sku": sku, "qty": qty, "price": 42 * qty}

        @kit.tool(name="prices.alookup", semantics=REVERSIBLE)
        async def alookup(sku: str) -> dict[str, Any]:
            self.calls.append(sku)
            await asyncio.sleep(0)
            return {"sku": sku, "price": 7}

        self.lookup = lookup
        self.alookup = alookup


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def kit(home: Path, clock: FakeClock) -> Any:
    with AgentKit(home=home, ids=SequentialIds(), clock=clock) as made:
        yield made


def _kinds(kit: AgentKit, prefix: str = "speculation.") -> list[tuple[str, dict[str, Any]]]:
    kit.store.sync()
    return [(r.kind, dict(r.data)) for r in kit.store.records() if r.kind.startswith(prefix)]


def _reasons(kit: AgentKit) -> list[str]:
    return [str(d["reason"]) for k, d in _kinds(kit) if k == Kind.SPECULATION_REFUSED]


def test_the_confirmed_call_gets_the_result_run_ahead_once(kit: AgentKit) -> None:
    tools = Lookup(kit)
    with kit.transaction("quote"):
        lease = kit.speculate(tools.lookup, sku="A1", qty=2)
        assert tools.calls == ["A1"]  # it ran now, ahead of the model's confirmation
        assert tools.lookup(sku="A1", qty=2) == {"sku": "A1", "qty": 2, "price": 84}
        assert tools.calls == ["A1"]  # the confirmed call ran nothing
        assert kit.redeem(lease, tools.lookup, sku="A1", qty=2)["price"] == 84
        assert tools.calls == ["A1", "A1"]  # a second redemption runs the call normally
    kinds = [k for k, _ in _kinds(kit)]
    assert kinds == [
        Kind.SPECULATION_ISSUED,
        Kind.SPECULATION_REDEEMED,
        Kind.SPECULATION_REFUSED,
    ]
    assert _reasons(kit) == ["already redeemed"]
    saga = build_history(kit.store.records()).sagas[0]
    assert [s.ordinal for s in saga.steps] == [1, 2]  # the speculated step, then the rerun
    assert saga.steps[0].speculation is not None
    assert "redeemed by the confirmed call" in saga.steps[0].speculation
    assert tools.undone == []  # a redeemed step is a step of the saga: it stays
    spent = list((kit.home / "speculation" / "spent").iterdir())
    assert [p.name.split("-")[1] for p in spent] == [lease.nonce]


@pytest.mark.parametrize("semantics", [COMPENSABLE, IRREVERSIBLE])
def test_only_reversible_steps_may_run_ahead(kit: AgentKit, semantics: Any) -> None:
    ran: list[int] = []

    @kit.tool(
        name="act",
        semantics=semantics,
        compensate=(lambda: None) if semantics is COMPENSABLE else None,
    )
    def act() -> None:
        ran.append(1)

    with kit.transaction("t"), pytest.raises(SpeculationError, match="only REVERSIBLE"):
        kit.speculate(act)
    assert ran == []
    kit.store.sync()
    assert [r.kind for r in kit.store.records()] == ["saga.begin", "saga.end"]


def test_speculation_needs_a_transaction_of_its_own_kit(kit: AgentKit, tmp_path: Path) -> None:
    tools = Lookup(kit)
    with pytest.raises(SpeculationError, match="inside a transaction"):
        kit.speculate(tools.lookup, sku="A1")
    with (
        AgentKit(home=tmp_path / "other", store="memory") as other,
        other.transaction("t"),
        pytest.raises(SpeculationError, match="another kit"),
    ):
        kit.speculate(tools.lookup, sku="A1")
    with kit.transaction("t"):
        with pytest.raises(SpeculationError, match="declared with @tool"):
            kit.speculate(print, "x")
        with pytest.raises(SpeculationError, match="aspeculate"):
            kit.speculate(tools.alookup, sku="A1")
        with pytest.raises(SpeculationError, match="cannot bind"):
            kit.speculate(tools.lookup, sku=object())
    assert tools.calls == []


def test_other_arguments_or_another_saga_yield_nothing_and_say_why(kit: AgentKit) -> None:
    tools = Lookup(kit)
    with kit.transaction("first"):
        lease = kit.speculate(tools.lookup, sku="A1")
        assert kit.redeem(lease, tools.lookup, sku="A1", qty=3)["qty"] == 3
        assert tools.lookup(sku="B2") == {"sku": "B2", "qty": 1, "price": 42}  # no match
    with kit.transaction("second"):
        assert kit.redeem(lease, tools.lookup, sku="A1")["sku"] == "A1"
    assert tools.calls == ["A1", "A1", "B2", "A1"]
    assert _reasons(kit) == ["issued for other arguments", "issued for another saga"]
    discarded = [d for k, d in _kinds(kit) if k == Kind.SPECULATION_DISCARDED]
    assert [(d["ordinal"], d["undo"]) for d in discarded] == [(1, "undone now")]
    assert tools.undone == ["A1"]  # the unredeemed step left local state: undone at commit


def test_an_expired_lease_yields_nothing(kit: AgentKit, clock: FakeClock) -> None:
    tools = Lookup(kit)
    with kit.transaction("slow model"):
        kit.speculate(tools.lookup, sku="A1")
        clock.advance(kit.speculation.ttl)  # expiry is exclusive
        tools.lookup(sku="A1")
    assert tools.calls == ["A1", "A1"]
    assert _reasons(kit) == ["expired"]


def test_unredeemed_steps_are_undone_when_the_saga_rolls_back_or_a_savepoint_undoes_them(
    kit: AgentKit,
) -> None:
    tools = Lookup(kit)
    with pytest.raises(SagaRolledBack), kit.transaction("rolled back"):
        kit.speculate(tools.lookup, sku="A1")
        raise RuntimeError("the model changed its mind")
    assert tools.undone == ["A1"]
    with kit.transaction("savepoint"):
        with pytest.raises(SagaRolledBack), kit.transaction("inner"):
            lease = kit.speculate(tools.lookup, sku="B2")
            raise RuntimeError("inner failure")
        assert kit.redeem(lease, tools.lookup, sku="B2")["sku"] == "B2"
    assert tools.undone == ["A1", "B2"]
    assert tools.calls == ["A1", "B2", "B2"]
    assert _reasons(kit) == ["its step was discarded or undone"]
    undo = [d["undo"] for k, d in _kinds(kit) if k == Kind.SPECULATION_DISCARDED]
    assert undo == ["undone by the rollback", "nothing to undo"]


def test_the_gate_decides_on_a_speculated_step(home: Path) -> None:
    with AgentKit(home=home, rules=[DenyTools(frozenset({"prices.lookup"}))]) as kit:
        tools = Lookup(kit)
        with kit.transaction("t"), pytest.raises(GateRefused):
            kit.speculate(tools.lookup, sku="A1")
        kit.store.sync()
        assert "gate.refused" in [r.kind for r in kit.store.records()]
    assert tools.calls == []


def test_async_speculation_overlaps_the_model_and_is_redeemed(kit: AgentKit) -> None:
    tools = Lookup(kit)

    async def agent() -> list[Any]:
        async with kit.transaction("async"):

            async def model() -> str:
                await asyncio.sleep(0)
                return "A1"

            lease, confirmed = await asyncio.gather(
                kit.aspeculate(tools.alookup, sku="A1"), model()
            )
            first = await tools.alookup(sku=confirmed)
            second = await kit.aredeem(lease, tools.alookup, sku="A1")
            with pytest.raises(SpeculationError, match="speculate/redeem"):
                await kit.aspeculate(tools.lookup, sku="A1")
            return [first, second]

    assert asyncio.run(agent()) == [{"sku": "A1", "price": 7}] * 2
    assert tools.calls == ["A1", "A1"]
    assert _reasons(kit) == ["already redeemed"]


def test_keys_and_marks_are_private_files_and_secrets_stay_out_of_reprs(kit: AgentKit) -> None:
    tools = Lookup(kit)
    with kit.transaction("t"):
        lease = kit.speculate(tools.lookup, sku="A1")
        tools.lookup(sku="A1")
    directory = kit.home / "keys" / "leases"
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    (key_file,) = directory.iterdir()
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    key = kit.speculation.keys.get(lease.key_id, 0.0)
    assert key is not None
    assert key.secret.hex() not in repr(key)
    assert lease.token not in repr(lease)
    log_text = (kit.home / "log.jsonl").read_bytes()
    assert key.secret.hex().encode() not in log_text
    assert lease.token.encode() not in log_text
    os.chmod(key_file, 0o644)
    with pytest.raises(ConfigurationError, match="chmod 600"):
        FileLeaseKeys(kit.home).current(kit.runtime.clock.now())


def test_a_memory_kit_keeps_its_leases_in_memory(tmp_path: Path) -> None:
    home = tmp_path / "nothing-here"
    with AgentKit(home=home, store="memory") as kit:
        tools = Lookup(kit)
        with kit.transaction("t"):
            kit.speculate(tools.lookup, sku="A1")
            tools.lookup(sku="A1")
    assert tools.calls == ["A1"]
    assert not home.exists()


def test_replay_shows_a_step_run_ahead(home: Path) -> None:
    with AgentKit(home=home) as kit:
        tools = Lookup(kit)
        with kit.transaction("quote"):
            kit.speculate(tools.lookup, sku="A1")
            tools.lookup(sku="A1")
        saga = build_history(kit.store.records()).sagas[0].id
    result = CliRunner().invoke(main, ["--home", str(home), "replay", saga])
    assert result.exit_code == 0, result.output
    assert "ran ahead of confirmation" in result.output
    assert "redeemed by the confirmed call" in result.output


def test_a_suspended_saga_discards_what_ran_ahead(kit: AgentKit) -> None:
    """A result run ahead lives in its process: suspending the saga undoes it, and the resumed
    saga runs the confirmed call normally."""
    calls: list[str] = []
    undone: list[str] = []

    @kit.compensator("test_speculate.forget")
    def forget(sku: str) -> None:
        undone.append(sku)

    @kit.tool(name="prices.named", semantics=REVERSIBLE, compensate="test_speculate.forget")
    def lookup(sku: str) -> str:
        calls.append(sku)
        return sku

    with kit.transaction("wait for the model") as saga:
        lease = kit.speculate(lookup, sku="A1")
        saga.suspend()
    assert undone == ["A1"]
    with kit.transaction(resume=saga.id):
        assert kit.redeem(lease, lookup, sku="A1") == "A1"
    assert calls == ["A1", "A1"]
    assert _reasons(kit) == ["no result is held for it in this process"]


class FrameworkTool:
    """What an adapter gives a framework tool so it can run ahead: its guard and its body."""

    def __init__(self) -> None:
        self.guard = ToolCallGuard("shop.price", semantics=REVERSIBLE, parameters=["sku"])
        self.bodies: list[str] = []

    def call_ahead(self, arguments: dict[str, Any]) -> Any:
        def body(step: StepRef) -> tuple[Any, Any]:
            self.bodies.append(arguments["sku"])
            return {"framework": "output"}, f"price of {arguments['sku']}"

        return body

    def call(self, sku: str) -> Any:
        """The confirmed call, as an adapter makes it through the one-phase seam."""

        def effect(step: StepRef | None) -> Any:
            self.bodies.append(sku)
            return {"framework": sku}

        return self.guard.run({"sku": sku}, effect)


def test_a_call_through_the_adapter_seam_takes_a_step_run_ahead(kit: AgentKit) -> None:
    shop = FrameworkTool()
    with kit.transaction("quote") as saga:
        lease = kit.speculate(shop, sku="A-7")
        assert shop.call("A-7") == {"framework": "output"}  # what the body run ahead gave
        assert shop.call("A-7") == {"framework": "A-7"}  # once: the next call runs
        kit.speculate(shop, sku="B-2")
        pending = shop.guard.begin({"sku": "B-2"})  # two phases: never takes one
        assert isinstance(pending, PendingCall)
        assert pending.run(lambda step: "ran") == "ran"
        with pytest.raises(SpeculationError, match="named arguments only"):
            kit.speculate(shop, "C-1")
    assert shop.bodies == ["A-7", "A-7", "B-2"]
    records = [r for r in kit.store.records() if r.saga == saga.id]
    done = [r.data for r in records if r.kind == Kind.STEP_DONE]
    assert done[0]["result"] == "price of A-7"  # the result the adapter logs
    redeemed = [r.data["lease"] for r in records if r.kind == Kind.SPECULATION_REDEEMED]
    assert redeemed == [lease.nonce]
    assert [r.kind for r in records].count(Kind.SPECULATION_DISCARDED) == 1  # B-2's guess
