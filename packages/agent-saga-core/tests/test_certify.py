"""certify: exit 0 only when the chain, the checkpoint and every saga are sound."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from agent_saga import (
    AgentKit,
    Entry,
    FileLogStore,
    SagaRolledBack,
    SequentialIds,
    compensator,
    tool,
)
from agent_saga.cli import main
from agent_saga.proofs._certify import verify_certificate
from agent_saga.proofs._signing import home_verifier
from click.testing import CliRunner, Result

REFUNDS: list[str] = []


@compensator("certify.refund")
def refund(result: str) -> None:
    if result == "ch_13":
        raise ConnectionError("payments API down")
    REFUNDS.append(result)


@tool(name="certify.charge", compensate="certify.refund")
def charge(cents: int) -> str:
    return f"ch_{cents}"


def certify(home: Path, *args: str) -> Result:
    return CliRunner().invoke(main, ["--home", str(home), "certify", *args])


def test_a_sound_log_is_certified_with_a_signed_certificate(home: Path, tmp_path: Path) -> None:
    with AgentKit(home=home, ids=SequentialIds()) as kit:
        with kit.transaction("paid"):
            charge(100)
        with pytest.raises(SagaRolledBack), kit.transaction("declined"):
            charge(200)
            raise RuntimeError("declined")
    out = tmp_path / "cert.json"
    result = certify(home, "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "certified: 2 sagas" in result.output
    cert = json.loads(out.read_text())
    assert cert["ok"] is True
    assert cert["findings"] == []
    assert cert["counts"]["committed"] == 1
    assert cert["counts"]["rolled_back"] == 1
    verifier = home_verifier(home)
    assert verifier is not None
    assert cert["checkpoint"].startswith(verifier.name + "\n")
    assert verify_certificate(cert, [verifier])
    forged = {**cert, "counts": {**cert["counts"], "critical": 0, "needs_human": 0, "sagas": 1}}
    assert not verify_certificate(forged, [verifier])


def test_a_broken_chain_is_critical(home: Path) -> None:
    with AgentKit(home=home, ids=SequentialIds()) as kit, kit.transaction("paid"):
        charge(100)
    log = home / "log.jsonl"
    log.write_bytes(log.read_bytes().replace(b'"cents":100', b'"cents":900', 1))
    result = certify(home)
    assert result.exit_code == 1
    assert "CRITICAL" in result.output
    assert "hash chain is broken" in result.output
    assert "NOT CERTIFIED" in result.output


def test_a_failed_compensation_is_critical(home: Path) -> None:
    with (
        AgentKit(home=home, ids=SequentialIds()) as kit,
        pytest.raises(SagaRolledBack),
        kit.transaction("stuck"),
    ):
        charge(13)
        raise RuntimeError("declined")
    result = certify(home)
    assert result.exit_code == 1
    assert "compensating certify.charge failed" in result.output


CRASHING_AGENT = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, os.environ["TESTS_DIR"])
    from agent_saga import AgentKit
    from test_certify import charge

    kit = AgentKit(home=os.environ["AGENT_SAGA_HOME"])
    with kit.transaction("crashes"):
        charge(42)
        os._exit(9)  # the process dies with the charge made and nothing undone
    """
)


def test_a_crashed_saga_with_an_outstanding_charge_is_critical_until_recovered(
    home: Path,
) -> None:
    env = {**os.environ, "AGENT_SAGA_HOME": str(home), "TESTS_DIR": str(Path(__file__).parent)}
    child = subprocess.run([sys.executable, "-c", CRASHING_AGENT], env=env, check=False)
    assert child.returncode == 9
    result = certify(home)
    assert result.exit_code == 1, result.output
    assert "crashed and was never recovered" in result.output
    assert "took effect in a saga that did not commit and was not compensated" in result.output
    REFUNDS.clear()
    with AgentKit(home=home) as kit:
        kit.recover()
    assert REFUNDS == ["ch_42"]
    after = certify(home)
    assert after.exit_code == 0, after.output


def test_a_saga_of_a_live_process_is_a_warning(home: Path) -> None:
    with AgentKit(home=home) as kit:
        transaction = kit.transaction("open")
        transaction.__enter__()
        charge(7)
        result = certify(home)
        transaction.__exit__(None, None, None)
    assert result.exit_code == 0, result.output
    assert "WARNING" in result.output
    assert "still running" in result.output


def irreversible_saga(home: Path, approved: bool) -> None:
    """A log where an IRREVERSIBLE step ran (as a gate that allows it would let it)."""
    store = FileLogStore(home)
    saga = "saga-wire"
    entries = [
        Entry("saga.begin", saga, {"name": "wire", "owner": store.owner_id}, 1),
        Entry(
            "step.intent",
            saga,
            {"ordinal": 1, "tool": "bank.wire", "semantics": "irreversible", "args": {"usd": 9}},
            2,
        ),
    ]
    if approved:
        entries.append(
            Entry("approval.decided", saga, {"ordinal": 1, "decision": "approved", "by": "u"}, 3)
        )
    entries += [
        Entry("step.done", saga, {"ordinal": 1, "tool": "bank.wire", "result": "ok"}, 4),
        Entry("saga.end", saga, {"status": "committed", "steps": 1, "records": len(entries)}, 5),
    ]
    store.append(entries, sync=True)
    store.close()


@pytest.mark.parametrize("approved", [False, True])
def test_an_irreversible_step_needs_a_recorded_approval(home: Path, approved: bool) -> None:
    irreversible_saga(home, approved)
    result = certify(home)
    assert result.exit_code == (0 if approved else 1), result.output
    assert ("bank.wire ran without an approval" in result.output) is not approved


def test_a_truncated_log_is_critical(home: Path) -> None:
    with AgentKit(home=home, ids=SequentialIds()) as kit:
        for _ in range(2):
            with kit.transaction("paid"):
                charge(100)
    log = home / "log.jsonl"
    lines = log.read_bytes().rstrip(b"\x00").splitlines(keepends=True)
    log.write_bytes(b"".join(lines[:-2]))
    result = certify(home)
    assert result.exit_code == 1
    assert "log truncated" in result.output
