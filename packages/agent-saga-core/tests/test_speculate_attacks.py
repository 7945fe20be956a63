"""Leases attacked as a hostile caller would: replayed in another home, in another process on
the same home, after a process was killed with the result in hand; and a tool whose leases
could never hold is refused before it runs ahead.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from agent_saga import REVERSIBLE, AgentKit, SequentialIds, SpeculationError
from agent_saga._engine.speculation.keys import MemoryLeaseKeys
from agent_saga._engine.speculation.lease import MAX_LEASE, LeaseClaims, issue, lease_length
from agent_saga._log.records import Kind
from hypothesis import given, settings
from hypothesis import strategies as st

AGENT = textwrap.dedent(
    """
    import os, sys, time
    from agent_saga import REVERSIBLE, AgentKit, SequentialIds

    kit = AgentKit(home=sys.argv[1], ids=SequentialIds("replay"))

    @kit.tool(name="prices.lookup", semantics=REVERSIBLE)
    def lookup(sku: str) -> str:
        return "price of " + sku

    with kit.transaction("t"):
        lease = kit.speculate(lookup, sku="A1")
        with open(sys.argv[2] + ".tmp", "w") as out:
            out.write(str(lease))
        if sys.argv[3] == "redeem":
            result = kit.redeem(lease, lookup, sku="A1")
            assert result == "price of A1"
        os.rename(sys.argv[2] + ".tmp", sys.argv[2])  # the parent may kill it from now on
        if sys.argv[3] == "redeem":
            time.sleep(120)  # holding the result, never using it
    """
)


def _kit(home: Path, calls: list[str]) -> tuple[AgentKit, object]:
    kit = AgentKit(home=home, ids=SequentialIds("replay"))

    @kit.tool(name="prices.lookup", semantics=REVERSIBLE)
    def lookup(sku: str) -> str:
        calls.append(sku)
        return "fresh price of " + sku

    return kit, lookup


def _reasons(kit: AgentKit) -> list[object]:
    kit.store.sync()
    return [r.data["reason"] for r in kit.store.records() if r.kind == Kind.SPECULATION_REFUSED]


def _agent(home: Path, token_file: Path, mode: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "AGENT_SAGA_HOME": str(home)}
    return subprocess.Popen(
        [sys.executable, "-c", AGENT, str(home), str(token_file), mode],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _present(home: Path, token: str) -> tuple[list[str], list[object], object]:
    calls: list[str] = []
    kit, lookup = _kit(home, calls)
    with kit, kit.transaction("t"):  # the same saga id, tool and arguments
        result = kit.redeem(token, lookup, sku="A1")
    return calls, _reasons(kit), result


def test_a_lease_from_another_home_never_counts(tmp_path: Path) -> None:
    first_calls: list[str] = []
    first, lookup = _kit(tmp_path / "a", first_calls)
    with first, first.transaction("t"):
        token = str(first.speculate(lookup, sku="A1"))
    calls, reasons, result = _present(tmp_path / "b", token)
    assert result == "fresh price of A1"
    assert calls == ["A1"]
    assert len(reasons) == 1
    assert str(reasons[0]).startswith("unknown or retired key id ")


def test_a_lease_replayed_by_another_process_on_the_same_home_never_counts(
    tmp_path: Path,
) -> None:
    home, token_file = tmp_path / "home", tmp_path / "lease.txt"
    child = _agent(home, token_file, "keep")
    _, err = child.communicate(timeout=60)
    assert child.returncode == 0, err.decode()
    calls, reasons, result = _present(home, token_file.read_text())
    assert result == "fresh price of A1"
    assert calls == ["A1"]
    assert reasons == ["no result is held for it in this process"]


def test_a_process_killed_holding_a_redeemed_result_leaves_the_lease_spent(
    tmp_path: Path,
) -> None:
    """SIGKILL from outside, after the redemption returned and before the result was used."""
    home, token_file = tmp_path / "home", tmp_path / "lease.txt"
    child = _agent(home, token_file, "redeem")
    try:
        deadline = time.monotonic() + 60
        while not token_file.exists():
            assert child.poll() is None, child.stderr.read().decode() if child.stderr else ""
            assert time.monotonic() < deadline, "the agent never redeemed its lease"
            time.sleep(0.02)
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait(timeout=60)
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()
    assert child.returncode == -signal.SIGKILL
    calls, reasons, result = _present(home, token_file.read_text())
    assert result == "fresh price of A1"
    assert calls == ["A1"]
    assert reasons == ["already redeemed"]


def test_a_tool_whose_lease_could_never_hold_does_not_run_ahead(tmp_path: Path) -> None:
    """A name so long that the lease would exceed ``MAX_LEASE``: refused at the call, before
    the step runs, not issued as a lease its own check refuses."""
    calls: list[str] = []
    with AgentKit(home=tmp_path, store="memory") as kit:

        @kit.tool(name="t." + "x" * MAX_LEASE, semantics=REVERSIBLE)
        def lookup(sku: str) -> str:
            calls.append(sku)
            return sku

        with kit.transaction("t"):
            with pytest.raises(SpeculationError, match="too long for a lease"):
                kit.speculate(lookup, sku="A1")
            assert lookup(sku="A1") == "A1"
        assert calls == ["A1"]
        assert _reasons(kit) == []


@settings(max_examples=200, derandomize=True, database=None, deadline=None)
@given(saga=st.text(max_size=40), tool=st.text(max_size=40))
def test_the_length_checked_before_running_ahead_is_the_issued_lease_length(
    saga: str, tool: str
) -> None:
    key = MemoryLeaseKeys().current(0.0)
    claims = LeaseClaims(key.kid, saga, tool, 1, "ab" * 32, "cd" * 32, 5, "ef" * 16)
    assert len(issue(key, claims)) == lease_length(saga, tool)


def test_a_broken_key_file_refuses_the_lease_instead_of_failing_the_call(tmp_path: Path) -> None:
    """A lease naming a key id the process does not know makes it read the key directory; a
    malformed key file there is a refusal with its reason (the call runs), never a raise."""
    calls: list[str] = []
    kit, lookup = _kit(tmp_path / "home", calls)
    with kit, kit.transaction("t"):
        lease = kit.speculate(lookup, sku="A1")
        junk = kit.home / "keys" / "leases" / "0000000000000000.key"
        junk.write_text("{}")
        junk.chmod(0o600)
        time.sleep(1.1)  # the directory is read again at most once a second
        forged = "asl3.1111111111111111." + str(lease).split(".", 2)[2]
        assert kit.redeem(forged, lookup, sku="A1") == "fresh price of A1"
        assert kit.redeem(lease, lookup, sku="A1") == "fresh price of A1"  # still holds
    reasons = _reasons(kit)
    assert calls == ["A1", "A1"]
    assert len(reasons) == 1
    assert "is not a lease key" in str(reasons[0])
