"""Two control-plane processes on one real PostgreSQL, with concurrent agents on each: budgets
never exceed their cap, each approval is decided once, and a halt reaches every agent."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import fleet_checks as checks
from agent_saga import AgentKit, Budget, SagaRolledBack
from plane_testkit import RunningServer


def test_replicas_started_together_make_one_admin_token_and_share_tokens(
    replicas: tuple[RunningServer, ...],
) -> None:
    one, two = replicas
    assert [one.printed_admin, two.printed_admin].count(True) == 1
    token = one.token("auditor", "ann")
    with two.client(token) as client:  # issued through one, accepted by two
        me = client.get("/v1/whoami").json()
        assert me["subject"] == "ann"
    with one.client(one.admin) as admin:
        listed = admin.get("/v1/tokens").json()["tokens"]
        assert [t["scope"] for t in listed].count("admin") == 1
        assert admin.delete(f"/v1/tokens/{me['token_id']}").status_code == 204
    with two.client(token) as client:  # revoked through one, refused by two at once
        assert client.get("/v1/whoami").status_code == 401


def test_budgets_hold_across_replicas_under_concurrent_agents(
    replicas: tuple[RunningServer, ...], tmp_path: Path
) -> None:
    one, two = replicas
    with one.client(one.admin) as admin:
        admin.put("/v1/budgets/fleet-wires", json={"cap": "70"})
    kits = [
        AgentKit(
            home=tmp_path / f"agent{i}",
            server=plane.url,
            token=plane.token("agent", f"wire-agent-{i}"),
            rules=[Budget("fleet-wires", 10_000, tools="wire")],
        )
        for i, plane in enumerate((one, two, one, two))
    ]
    paid: list[int] = []
    lock = threading.Lock()

    def agent(kit: AgentKit) -> None:
        @kit.tool(name="wire", compensate=lambda amount: None)
        def wire(amount: int) -> int:
            with lock:
                paid.append(amount)
            return amount

        for _ in range(6):
            try:
                with kit.transaction("pay"):
                    wire(5)
            except SagaRolledBack:
                pass

    threads = [threading.Thread(target=agent, args=(kit,)) for kit in kits]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert sum(paid) == 70  # 24 attempts of 5 on two replicas, cap 70
    with two.client(two.admin) as admin:
        [row] = [
            b for b in admin.get("/v1/budgets").json()["budgets"] if b["name"] == "fleet-wires"
        ]
    assert (row["spent"], row["held"]) == ("70", "0")
    for kit in kits:
        kit.close()


def test_each_approval_is_decided_once_across_replicas(
    replicas: tuple[RunningServer, ...],
) -> None:
    one, two = replicas
    agent = one.token("agent", "asker")
    approvers = [one.token("approver", "ana"), two.token("approver", "ben")]
    ids = [f"apr-{i:016x}" for i in range(1, 13)]
    with one.client(agent) as client:
        for request_id in ids:
            body = {
                "id": request_id, "saga": "s-1", "ordinal": 1, "tool": "bank.wire",
                "semantics": "irreversible", "digest": "ab" * 32, "args": {"amount": 1},
                "rule": "irreversible", "reason": "r", "approvers": ["ana", "ben"], "quorum": 1,
                "expires_at": time.time() + 600,
            }  # fmt: skip
            assert client.post("/v1/approvals", json=body).status_code == 201
    statuses: dict[str, list[int]] = {request_id: [] for request_id in ids}
    start = threading.Barrier(2)

    def vote(plane: RunningServer, token: str, decision: str) -> None:
        with plane.client(token) as client:
            start.wait()
            for request_id in ids:
                answer = client.post(
                    f"/v1/approvals/{request_id}/votes", json={"decision": decision}
                )
                statuses[request_id].append(answer.status_code)

    voters = [
        threading.Thread(target=vote, args=(one, approvers[0], "approve")),
        threading.Thread(target=vote, args=(two, approvers[1], "deny")),
    ]
    for thread in voters:
        thread.start()
    for thread in voters:
        thread.join(60)
    with one.client(one.admin) as a, two.client(two.admin) as b:
        for request_id in ids:
            assert sorted(statuses[request_id]) == [200, 409], statuses[request_id]
            seen_one = a.get(f"/v1/approvals/{request_id}").json()
            seen_two = b.get(f"/v1/approvals/{request_id}").json()
            assert seen_one == seen_two
            assert len(seen_one["votes"]) == 1
            assert (
                seen_one["status"]
                == {"approve": "approved", "deny": "denied"}[seen_one["votes"][0]["decision"]]
            )


def test_a_halt_on_one_replica_reaches_agents_on_both_within_a_second(
    replicas: tuple[RunningServer, ...], tmp_path: Path
) -> None:
    one, two = replicas
    kits = [
        AgentKit(home=tmp_path / f"h{i}", server=plane.url, token=plane.token("agent", f"h{i}"))
        for i, plane in enumerate((one, two, two))
    ]
    try:
        assert all(not kit.runtime.kill_switch.state().halted for kit in kits)
        with one.client(one.admin) as admin:
            admin.post("/v1/killswitch/halt", json={"reason": "fleet drill"})
            started = time.monotonic()
            reached: dict[int, float] = {}
            while len(reached) < len(kits) and time.monotonic() - started < 5:
                for i, kit in enumerate(kits):
                    if i not in reached and kit.runtime.kill_switch.state().halted:
                        reached[i] = time.monotonic() - started
                time.sleep(0.005)
            admin.post("/v1/killswitch/resume", json={"reason": "drill over"})
        assert len(reached) == len(kits)
        assert max(reached.values()) < 1.0, reached
    finally:
        for kit in kits:
            kit.close()


def test_the_fleet_checks_on_a_postgresql_replica(
    replicas: tuple[RunningServer, ...], tmp_path: Path
) -> None:
    """What ``test_fleet`` checks on SQLite, on PostgreSQL (each check on one of the replicas)."""
    one, two = replicas
    try:
        checks.records_ship_sagas_list_and_a_saga_reads_as_replay_tells_it(one, tmp_path / "a")
        checks.approval_quorum_identity_single_use_and_the_decision_reaches_the_agent(
            two, tmp_path / "b"
        )
        checks.checkpoints_disclosure_and_certify_from_the_server(one, tmp_path / "c")
        checks.an_expired_request_takes_no_vote_and_ready_names_the_database(two)
        checks.a_conflicting_record_is_a_409_kept_as_evidence(one, tmp_path / "d")
    finally:
        checks.close_opened()
