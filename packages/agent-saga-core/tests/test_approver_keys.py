"""Issue 15, point 3: approver keys are registered and revoked only with authority.

The attacker can write the home but holds neither an administrator key nor the approver's key.
With ``Approvals(require_signature=True, approvers=["alice"])`` they make a key, register it as
alice's and sign an approval with it: the irreversible step must not run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent_saga import AgentKit, SequentialIds, tool
from agent_saga._approvals.request import ApprovalBook, ApprovalRequest
from agent_saga._approvals.wait import Approvals
from agent_saga.cli import main
from click.testing import CliRunner, Result

WIRES: list[int] = []


@tool(name="keys.wire")
def wire(usd: int) -> str:
    WIRES.append(usd)
    return f"wire-{usd}"


def cli(home: Path, *args: str) -> Result:
    return CliRunner().invoke(main, ["--home", str(home), *args])


def in_thread(body: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["result"] = body()
        except BaseException as exc:  # the test inspects it
            outcome["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    return thread, outcome


def first_request(kit: AgentKit) -> ApprovalRequest:
    import time

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        requests = ApprovalBook().take_all(kit.store.records()).requests
        if requests:
            return next(iter(requests.values()))
        time.sleep(0.01)
    raise AssertionError("no approval request was logged")


def test_a_key_anyone_registers_for_alice_does_not_approve_as_alice(
    home: Path, tmp_path: Path
) -> None:
    mallory = tmp_path / "mallory.key"
    assert cli(home, "keys", "new", str(mallory)).exit_code == 0
    WIRES.clear()
    approvals = Approvals(approvers=["alice"], require_signature=True, poll=0.01, expires_after=3.0)
    with AgentKit(home=home, ids=SequentialIds(), approvals=approvals) as kit:
        added = cli(home, "keys", "add", "alice", f"{mallory}.pub")
        assert added.exit_code != 0, added.output

        def agent() -> str:
            with kit.transaction("pay"):
                return wire(1_000_000)

        thread, outcome = in_thread(agent)
        request = first_request(kit)
        voted = cli(home, "approve", request.id, "--sign", str(mallory))
        thread.join(timeout=30)
        kinds = [r.kind for r in kit.store.records()]
    assert voted.exit_code != 0, voted.output
    assert WIRES == []
    assert "expired" in str(outcome.get("error"))
    assert "approver.key_refused" in kinds  # the attempt is on the record
    assert "approver.key_added" not in kinds
