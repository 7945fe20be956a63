"""Three devices act offline and sync through a folder: conflicts are found and escalated,
``sagas``, ``replay``, ``verify`` and ``certify`` read the merged log, and tampering with one
origin's records after the merge is caught (and repaired by merging the device again).

Devices: robot A and robot B reserve the same dock slot for order 42 (the same idempotency key)
and both roll back, so both compensate it; C, the operator's laptop, halts the fleet; A syncs
and learns of the halt; B, offline, charges after it. Each device has its own kit, home, key
and clock (A's clock runs eight minutes behind).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from agent_saga import (
    REVERSIBLE,
    AgentKit,
    CompensatorRegistry,
    FakeClock,
    HaltedError,
    SagaRolledBack,
    SequentialIds,
)
from agent_saga._log.chain import Chain, ChainBreak, check_object, stored_line
from agent_saga._log.codec import canonical
from agent_saga._log.commit import open_forms
from agent_saga._log.records import Kind
from agent_saga.cli import main
from agent_saga.proofs._checkpoint import Checkpoint
from agent_saga.proofs._logtree import tree_of
from agent_saga.proofs._mesh.certify import certify_merged
from agent_saga.proofs._mesh.conflicts import FleetBudget
from agent_saga.proofs._mesh.merge import merge_logs
from agent_saga.proofs._mesh.origin import read_origin
from agent_saga.proofs._mesh.view import merged_view
from agent_saga.proofs._signing import home_signer
from click.testing import CliRunner

T0 = 1_700_000_000.0
SPEND = FleetBudget("spend", Decimal(100), "amount", frozenset({"payments.charge"}))


@dataclass
class Device:
    name: str
    home: Path
    clock: FakeClock
    kit: AgentKit
    refunds: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    tools: dict[str, Callable[..., Any]] = field(default_factory=dict)

    def at(self, seconds: float) -> Device:
        self.clock.advance(T0 + seconds - self.clock.now() + self.skew)
        return self

    @property
    def skew(self) -> float:
        return -480.0 if self.name == "a" else 0.0


def _device(root: Path, name: str) -> Device:
    clock = FakeClock(T0 + (-480.0 if name == "a" else 0.0))
    registry = CompensatorRegistry()
    kit = AgentKit(
        home=root / name, ids=SequentialIds(f"{name}-saga"), clock=clock, registry=registry
    )
    device = Device(name, root / name, clock, kit)

    @kit.compensator("slots.release")
    def release(slot: str, idempotency_key: str) -> None:
        device.released.append(idempotency_key)

    @kit.compensator("payments.refund")
    def refund(result: str) -> None:
        device.refunds.append(result)

    @kit.tool(name="slots.reserve", compensate="slots.release")
    def reserve(slot: str, idempotency_key: str) -> str:
        return f"{slot}/{idempotency_key}"

    @kit.tool(name="payments.charge", compensate="payments.refund")
    def charge(amount: int) -> str:
        return f"ch-{name}-{amount}"

    @kit.tool(name="route.check", semantics=REVERSIBLE)
    def check(slot: str) -> None:
        raise RuntimeError(f"no route to {slot}")

    device.tools.update(reserve=reserve, charge=charge, check=check)
    return device


def _order_42(device: Device) -> None:
    """Reserve dock slot 7 for order 42 (its key is the order's), then fail: roll back."""
    with pytest.raises(SagaRolledBack), device.kit.transaction("order-42"):
        device.tools["reserve"](slot="s7", idempotency_key="order-42")
        device.tools["check"](slot="s7")


def _charge(device: Device, amount: int) -> None:
    with device.kit.transaction("charge"):
        device.tools["charge"](amount=amount)


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Device], Path]:
    """The story of the module docstring, run once; the devices (closed) and the mesh."""
    root = tmp_path_factory.mktemp("fleet")
    mesh = root / "mesh"
    devices = {name: _device(root, name) for name in "abc"}
    a, b, c = devices["a"], devices["b"], devices["c"]
    _order_42(a.at(10))
    _charge(a.at(20), 60)
    _order_42(b.at(15))
    c.at(30).kit.halt("storm warning")
    c.at(31).kit.sync(mesh)
    report = a.at(35).kit.sync(mesh)
    assert report.fleet_halt == "storm warning"
    with pytest.raises(HaltedError):  # A now refuses effects: it has seen the halt
        _charge(a.at(36), 5)
    _charge(b.at(40), 60)  # offline: B has not seen the halt
    b.at(50).kit.sync(mesh)
    for device in devices.values():
        device.kit.close()  # a last checkpoint: what each did after its last sync is signed
    assert merge_logs(mesh, [d.home for d in devices.values()]).ok  # collected afterwards
    return devices, mesh


@pytest.fixture
def fleet(story: tuple[dict[str, Device], Path], tmp_path: Path) -> tuple[dict[str, Device], Path]:
    """The story's mesh, copied for one test (which may change it)."""
    devices, mesh = story
    copy = tmp_path / "mesh"
    shutil.copytree(mesh, copy)
    return devices, copy


def test_conflicts_are_listed_by_certify_and_never_resolved(
    fleet: tuple[dict[str, Device], Path],
) -> None:
    devices, mesh = fleet
    a, b = devices["a"], devices["b"]
    assert a.released == ["order-42/compensate"] == b.released
    cert, findings = certify_merged(mesh, budgets=[SPEND])
    assert cert["ok"] is False
    by_check = {f.check: f for f in findings if f.severity == "CRITICAL"}
    assert set(by_check) == {"double_compensation", "effect_after_halt", "budget_overspent"}
    names = {name: read_origin(d.home).name for name, d in devices.items()}
    double = by_check["double_compensation"].message
    assert "order-42" in double
    assert names["a"] in double
    assert names["b"] in double
    halted = [f for f in findings if f.check == "effect_after_halt"]
    assert len(halted) == 1  # B's charge; A's came before the halt and A refused after it
    assert names["b"] in halted[0].message
    assert "had not yet seen it" in halted[0].message
    assert halted[0].tool == "payments.charge"
    overspent = by_check["budget_overspent"].message
    assert "120 spent of 100" in overspent
    assert f"{names['a']}: 60" in overspent


def test_the_merged_order_follows_what_a_device_had_seen_despite_its_clock(
    fleet: tuple[dict[str, Device], Path],
) -> None:
    devices, mesh = fleet
    view = merged_view(mesh)
    ids = {name: read_origin(d.home).id for name, d in devices.items()}
    kinds = [(m.origin_id, m.record.kind) for m in view.records]
    halt = kinds.index((ids["c"], Kind.HALT))
    seen_by_a = kinds.index((ids["a"], Kind.MESH_SEEN))
    a_seen = next(
        m for m in view.records if m.origin_id == ids["a"] and m.record.kind == "mesh.seen"
    )
    c_halt = view.records[halt]
    assert a_seen.record.ts < c_halt.record.ts  # A's clock is behind ...
    assert seen_by_a > halt  # ... yet its sync comes after the halt it saw
    assert [m.clock for m in view.records] == sorted(m.clock for m in view.records)
    assert len(view.records) == sum(view.sizes.values())


def test_sagas_replay_verify_and_certify_read_the_merged_log(
    fleet: tuple[dict[str, Device], Path],
) -> None:
    _, mesh = fleet
    runner = CliRunner()
    listed = runner.invoke(main, ["--home", str(mesh), "sagas"])
    assert listed.exit_code == 0, listed.output
    for saga in ("a-saga-0001", "a-saga-0002", "b-saga-0001", "b-saga-0002"):
        assert saga in listed.output
    replay = runner.invoke(main, ["--home", str(mesh), "replay", "b-saga-0001"])
    assert replay.exit_code == 0
    assert "slots.reserve" in replay.output
    verify = runner.invoke(main, ["--home", str(mesh), "verify"])
    assert verify.exit_code == 0, verify.output
    assert verify.output.count("chain and signed checkpoints verify") == 3
    budget = "spend=100:amount:payments.charge"
    cert = runner.invoke(main, ["--home", str(mesh), "certify", "--budget", budget])
    assert cert.exit_code == 1
    assert "compensated by 2 origins" in cert.output
    assert "after a fleet halt" in cert.output
    assert "overspent across devices" in cert.output
    bad = runner.invoke(main, ["--home", str(mesh), "certify", "--budget", "spend"])
    assert bad.exit_code == 2
    assert "NAME=LIMIT" in bad.output


def test_each_origin_of_the_mesh_verifies_with_the_plain_verify_command(
    fleet: tuple[dict[str, Device], Path],
) -> None:
    _, mesh = fleet
    for origin in (mesh / "origins").iterdir():
        result = CliRunner().invoke(main, ["--home", str(origin), "verify"])
        assert result.exit_code == 0, result.output
        assert "consistent with the latest checkpoint" in result.output


def _b_log(devices: dict[str, Device], mesh: Path) -> Path:
    return mesh / "origins" / read_origin(devices["b"].home).id / "log.jsonl"


def test_a_record_changed_after_the_merge_is_rejected_and_merging_again_repairs_it(
    fleet: tuple[dict[str, Device], Path],
) -> None:
    devices, mesh = fleet
    log = _b_log(devices, mesh)
    log.write_bytes(log.read_bytes().replace(b'"s7"', b'"s9"', 1))
    view = merged_view(mesh)
    assert len(view.rejected) == 1
    assert "hash does not match" in view.rejected[0].reason
    assert read_origin(devices["b"].home).id not in view.sizes  # its checkpoint covered all
    runner = CliRunner()
    assert runner.invoke(main, ["--home", str(mesh), "verify"]).exit_code == 1
    listed = runner.invoke(main, ["--home", str(mesh), "sagas"])
    assert listed.exit_code == 1
    assert "agent-saga certify" in listed.output
    _, findings = certify_merged(mesh)
    assert any(f.check == "rejected" and f.severity == "CRITICAL" for f in findings)
    report = merge_logs(mesh, [devices["b"].home])
    assert any("hash does not match" in r.reason for r in report.rejected)  # reported once
    assert merged_view(mesh).rejected == ()
    assert list((mesh / "rejected").iterdir())  # the changed copy is kept as evidence
    assert runner.invoke(main, ["--home", str(mesh), "verify"]).exit_code == 0


def test_a_rehashed_origin_fails_its_checkpoint_and_a_resigned_one_is_not_the_origin(
    fleet: tuple[dict[str, Device], Path], tmp_path: Path
) -> None:
    devices, mesh = fleet
    log = _b_log(devices, mesh)
    records = [json.loads(line) for line in log.read_bytes().splitlines()]
    target = next(i for i, r in enumerate(records) if r["data"].get("args", {}).get("amount"))
    assert records[target]["v"] == 2  # its arguments are committed through salts
    assert records[target]["salts"]
    records[target]["data"]["args"]["amount"] = 6  # the charge, made to look small
    chain, prev, lines, sealed = Chain(), "0" * 64, [], []
    for index, obj in enumerate(records, 1):
        # Every record re-hashed under its own published salts (the edited value's commitment
        # recomputed from its salt), each linked to the rewritten one before it.
        obj["prev"] = prev
        hashed = dict(obj["data"])
        if obj.get("salts") is not None:
            hashed = json.loads(open_forms(obj["data"], obj["salts"])[0])
        body = {key: obj[key] for key in ("kind", "prev", "saga", "seq", "ts", "v")}
        obj["hash"] = chain.digest(prev, canonical({"data": hashed, **body}))
        record = check_object(chain, obj, index, prev)
        assert not isinstance(record, ChainBreak), record  # the rewritten chain holds
        prev = record.hash
        lines.append(stored_line(obj) + b"\n")
        sealed.append(record)
    log.write_bytes(b"".join(lines))  # a chain that verifies on its own
    view = merged_view(mesh)
    reasons = " | ".join(r.reason for r in view.rejected)
    assert "its root does not match the records" in reasons
    # An attacker re-signs the rewritten log with their own key: it no longer is origin B.
    origin = log.parent
    attacker = home_signer(tmp_path / "attacker")
    note = Checkpoint(attacker.name, len(sealed), tree_of(sealed).root()).sign(attacker).note
    (origin / "checkpoints" / "latest.note").write_text(note)
    (origin / "keys" / "checkpoint.pub").write_text(attacker.verifier.encode() + "\n")
    view = merged_view(mesh)
    assert any("is not the key of origin" in r.reason for r in view.rejected)
    trusted = [read_origin(d.home).verifier for d in devices.values()]
    alone = merge_logs(tmp_path / "trusting", [origin], trusted=trusted)
    assert [r.reason for r in alone.rejected] == ["not a trusted origin key"]
    assert alone.origins == ()


def test_merge_and_sync_on_the_command_line(tmp_path: Path) -> None:
    devices = {name: _device(tmp_path, name) for name in "ab"}
    for device in devices.values():
        _charge(device.at(5), 10)
        device.kit.close()
    runner = CliRunner()
    mesh = tmp_path / "mesh"
    homes = [str(d.home) for d in devices.values()]
    merged = runner.invoke(main, ["merge", *homes, "--into", str(mesh)])
    assert merged.exit_code == 0, merged.output
    assert "2 origins" in merged.output
    assert "0 rejected" in merged.output
    synced = runner.invoke(main, ["--home", homes[0], "sync", str(mesh)])
    assert synced.exit_code == 0, synced.output
    assert read_origin(devices["b"].home).name + ": " in synced.output
    missing = runner.invoke(main, ["merge", str(tmp_path / "nowhere"), "--into", str(mesh)])
    assert missing.exit_code == 1
    assert "REJECTED" in missing.output
    not_mesh = runner.invoke(main, ["merge", homes[1], "--into", homes[0]])
    assert not_mesh.exit_code == 1
    assert "not a mesh directory" in not_mesh.output
