"""Fleet-wide budgets on a real PostgreSQL server: one cap shared by every host, never exceeded
by concurrent spenders, and an unreachable server refuses spending and makes status() not ready.

The server is the one named by ``AGENT_SAGA_TEST_PG_URL`` or a throwaway local cluster; without
either the tests skip, except under CI, where they fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from decimal import Decimal
from pathlib import Path

import pytest
from agent_saga import (
    REVERSIBLE,
    AgentKit,
    Budget,
    GateRefused,
    PostgresBudgetStore,
    SagaRolledBack,
)
from agent_saga.testing import Ledger


def test_two_hosts_share_one_cap(pg_url: str, schema: str, home: Path) -> None:
    ledger = Ledger()
    host_a = PostgresBudgetStore(pg_url, schema=schema)
    host_b = PostgresBudgetStore(pg_url, schema=schema)
    try:
        kits = [
            AgentKit(home=home / name, store="memory", rules=[Budget("fleet", 100, store=store)])
            for name, store in (("a", host_a), ("b", host_b))
        ]
        pays = []
        for kit in kits:

            @kit.tool(name="pay", compensate=lambda amount: ledger.record("refund"))
            def pay(amount: int) -> None:
                ledger.record("pay", str(amount))

            pays.append(pay)
        with kits[0].transaction("a"):
            pays[0](70)
        with kits[1].transaction("b"), pytest.raises(GateRefused) as info:
            pays[1](40)
        assert info.value.reason == (
            "amount=40 would bring spending to 110, above the limit of 100 (70 spent, 0 held)"
        )
        with pytest.raises(SagaRolledBack), kits[1].transaction("b2"):
            pays[1](30)
            assert host_a.usage("fleet", "all") == (Decimal(70), Decimal(30))  # seen by host a
            raise RuntimeError("undo")
        assert host_a.usage("fleet", "all") == (Decimal(70), Decimal(0))
        assert ledger.actions() == ["pay", "pay", "refund"]
        for kit in kits:
            kit.close()
    finally:
        host_a.close()
        host_b.close()


CHILD = textwrap.dedent(
    """
    import json, os, sys, time
    from agent_saga import AgentKit, Budget, GateRefused, SagaRolledBack, PostgresBudgetStore

    url, schema, go, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    store = PostgresBudgetStore(url, schema=schema)
    store.usage("fleet", "all")  # connected before the start
    print("ready", flush=True)
    deadline = time.monotonic() + 60
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.001)
    spent = refused = 0
    with AgentKit(store="memory", rules=[Budget("fleet", 120, store=store)]) as kit:

        @kit.tool(name="pay", compensate=lambda result: None)
        def pay(amount: int) -> int:
            return amount

        for i in range(rounds):
            try:
                with kit.transaction("child"):
                    pay(1)
                    if i % 4 == 3:
                        raise RuntimeError("roll back")
                spent += 1
            except SagaRolledBack as exc:
                refused += isinstance(exc.cause, GateRefused)
    store.close()
    print(json.dumps({"spent": spent, "refused": refused}))
    """
)


def test_eight_threads_and_two_processes_never_exceed_the_cap(
    pg_url: str, schema: str, tmp_path: Path
) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    go = tmp_path / "go"
    env = {**os.environ, "AGENT_SAGA_HOME": str(tmp_path / "child-home")}
    children = [
        subprocess.Popen(
            [sys.executable, str(script), pg_url, schema, str(go), "50"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    for child in children:
        assert child.stdout is not None
        assert child.stdout.readline() == "ready\n"
    totals = {"spent": 0, "refused": 0}
    lock = threading.Lock()
    start = threading.Barrier(8)

    def worker(n: int) -> None:
        store = PostgresBudgetStore(pg_url, schema=schema)  # its own connection, like a host
        store.usage("fleet", "all")
        try:
            kit = AgentKit(
                home=tmp_path / f"t{n}", store="memory", rules=[Budget("fleet", 120, store=store)]
            )

            @kit.tool(name="pay", semantics=REVERSIBLE)
            def pay(amount: int) -> None:
                pass

            start.wait()
            for i in range(12):
                try:
                    with kit.transaction("thread"):
                        pay(1)
                        if i % 4 == 3:
                            raise RuntimeError("roll back")
                    with lock:
                        totals["spent"] += 1
                except SagaRolledBack as exc:
                    with lock:
                        totals["refused"] += isinstance(exc.cause, GateRefused)
            kit.close()
        finally:
            store.close()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    go.touch()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    child_spent = child_refused = 0
    for child in children:
        out, err = child.communicate(timeout=240)
        assert child.returncode == 0, err
        answer = json.loads(out.strip().splitlines()[-1])
        child_spent += answer["spent"]
        child_refused += answer["refused"]
    check = PostgresBudgetStore(pg_url, schema=schema)
    try:
        spent, held = check.usage("fleet", "all")
    finally:
        check.close()
    assert held == 0
    assert spent == totals["spent"] + child_spent
    assert spent <= 120
    assert totals["refused"] + child_refused > 0  # 196 attempts, 147 would commit
    assert totals["spent"] > 0
    assert child_spent > 0


def test_unreachable_budget_store_refuses_and_is_not_ready(home: Path) -> None:
    ledger = Ledger()
    store = PostgresBudgetStore("postgresql://nobody@127.0.0.1:9/none", timeout=2)
    with AgentKit(home=home, rules=[Budget("fleet", 100, store=store)]) as kit:

        @kit.tool(name="pay", semantics=REVERSIBLE)
        def pay(amount: int) -> None:
            ledger.record("pay")

        with kit.transaction("t"), pytest.raises(GateRefused, match="reservation failed"):
            pay(5)
        status = kit.status()
        assert not status.ready
        assert "budget store unreachable" in status.checks["gate"]
        assert "127.0.0.1:9" in status.checks["gate"]
        assert "password" not in kit.guarantees()["gate"]["budgets"][0]["describes"]
    assert ledger.count("pay") == 0
    store.close()
