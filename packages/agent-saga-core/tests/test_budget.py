"""Spend budgets on the file store and in memory: reserved before the effect, released on
rollback, committed on success, kept across restarts, never exceeded by concurrent spenders."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from agent_saga import (
    REVERSIBLE,
    AgentKit,
    Budget,
    ConfigurationError,
    FakeClock,
    FileBudgetStore,
    GateRefused,
    MemoryBudgetStore,
    SagaRolledBack,
    SequentialIds,
)
from agent_saga.testing import Ledger


def spend_kit(home: Path, budget: Budget, ledger: Ledger, **kit: Any) -> tuple[AgentKit, Any]:
    """A kit with a ``pay`` tool (compensated by ``refund``) spending from ``budget``."""
    agent = AgentKit(home=home, rules=[budget], ids=SequentialIds(), **kit)

    def refund(amount: float) -> None:
        ledger.record("refund", str(amount))

    @agent.tool(name="pay", compensate=refund)
    def pay(to: str, amount: float) -> str:
        ledger.record("pay", str(amount))
        return to

    return agent, pay


def test_cap_refuses_before_the_effect_and_names_the_figures(home: Path) -> None:
    ledger = Ledger()
    budget = Budget("daily", 100, tools="pay", store=FileBudgetStore(home))
    kit, pay = spend_kit(home, budget, ledger)
    with kit:
        with kit.transaction("a"):
            pay("acme", 60)
        with kit.transaction("b"):
            with pytest.raises(GateRefused) as info:
                pay("acme", 50)
            pay("acme", 40)
    refused = info.value
    assert refused.rule == "daily"
    assert refused.reason == (
        "amount=50 would bring spending to 110, above the limit of 100 (60 spent, 0 held)"
    )
    assert ledger.count("pay") == 2
    assert budget.usage() == (Decimal(100), Decimal(0))


def test_reservation_is_released_on_rollback_and_kept_when_compensation_fails(home: Path) -> None:
    ledger = Ledger()
    budget = Budget("ops", 100, store=FileBudgetStore(home))
    kit, pay = spend_kit(home, budget, ledger)
    with kit:
        with pytest.raises(SagaRolledBack), kit.transaction("fails"):
            pay("acme", 70)
            assert budget.usage() == (Decimal(0), Decimal(70))  # held while the saga runs
            raise RuntimeError("later step failed")
        assert budget.usage() == (Decimal(0), Decimal(0))
        assert ledger.actions() == ["pay", "refund"]

        def broken_refund(amount: float) -> None:
            raise ConnectionError("refund API down")

        @kit.tool(name="pay.stuck", compensate=broken_refund)
        def stuck(amount: float) -> None:
            ledger.record("stuck")

        with pytest.raises(SagaRolledBack), kit.transaction("stuck"):
            stuck(30)
            raise RuntimeError("fail")
    # the charge could not be undone: it stays spent
    assert budget.usage() == (Decimal(30), Decimal(0))


def test_a_tool_that_raises_gives_its_reservation_back(home: Path) -> None:
    budget = Budget("ops", 10, store="memory")
    with AgentKit(home=home, rules=[budget]) as kit:

        @kit.tool(name="flaky", semantics=REVERSIBLE)
        def flaky(amount: int) -> None:
            raise TimeoutError("gateway timeout")

        with kit.transaction("t"):
            with pytest.raises(TimeoutError):
                flaky(8)
            assert budget.usage() == (Decimal(0), Decimal(0))


def test_savepoint_rollback_releases_only_its_steps(home: Path) -> None:
    ledger = Ledger()
    budget = Budget("ops", 100, store="memory")
    kit, pay = spend_kit(home, budget, ledger)
    with kit, kit.transaction("outer"):
        pay("a", 10)
        with pytest.raises(SagaRolledBack), kit.transaction("inner"):
            pay("b", 20)
            raise ValueError("inner fails")
        assert budget.usage() == (Decimal(0), Decimal(10))
    assert budget.usage() == (Decimal(10), Decimal(0))


def test_budgets_survive_a_restart(home: Path) -> None:
    ledger = Ledger()
    kit, pay = spend_kit(home, Budget("monthly", 100, store=FileBudgetStore(home)), ledger)
    with kit, kit.transaction("first run"):
        pay("acme", 90)
    again = Budget("monthly", 100, store=FileBudgetStore(home))
    assert again.usage() == (Decimal(90), Decimal(0))
    kit2, pay2 = spend_kit(home, again, ledger)
    with kit2, kit2.transaction("second run"), pytest.raises(GateRefused, match="monthly"):
        pay2("acme", 20)
    state = json.loads((home / "budgets" / "monthly.json").read_text())
    assert state["accounts"]["all"]["spent"] == "90"


def test_per_saga_and_windowed_budgets(home: Path) -> None:
    clock = FakeClock(start=3600 * 1000)
    ledger = Ledger()
    per_saga = Budget("per-saga", 50, per="saga", store="memory")
    hourly = Budget("hourly", 80, window=3600, store="memory", clock=clock)
    with AgentKit(home=home, rules=[per_saga, hourly]) as kit:

        @kit.tool(name="pay", semantics=REVERSIBLE)
        def pay(amount: int) -> None:
            ledger.record("pay", str(amount))

        with kit.transaction("a"):
            pay(40)
            with pytest.raises(GateRefused, match=r"per-saga.*this saga's spending"):
                pay(20)
        with kit.transaction("b"):
            pay(30)  # a fresh saga account; the hour's total is now 70
            with pytest.raises(GateRefused, match=r"hourly.*3600 s window"):
                pay(20)
        clock.advance(3600)
        with kit.transaction("c"):
            pay(45)  # a new hour
    assert ledger.count("pay") == 3
    assert hourly.usage() == (Decimal(45), Decimal(0))


@pytest.mark.parametrize("amount", ["10", None, -5, float("nan"), True])
def test_an_amount_that_cannot_be_counted_is_refused(home: Path, amount: Any) -> None:
    ledger = Ledger()
    kit, pay = spend_kit(home, Budget("b", 100, store="memory"), ledger)
    with kit, kit.transaction("t"), pytest.raises(GateRefused, match="not a non-negative number"):
        pay("x", amount)
    assert ledger.count("pay") == 0


def test_the_manifest_lists_each_budget_and_what_a_crash_leaves(home: Path) -> None:
    with AgentKit(home=home) as plain:
        manifest = plain.guarantees()
        assert manifest["gate"]["budgets"] == []
        assert not any("reservation" in line for line in manifest["not_claimed"])
    rules = [
        Budget("ads", 100, tools="ads.buy", store=FileBudgetStore(home)),
        Budget("per-run", 20, per="saga", window=60, store="memory"),
    ]
    with AgentKit(home=home, rules=rules) as kit:
        manifest = kit.guarantees()
    rows = manifest["gate"]["budgets"]
    assert [row["name"] for row in rows] == ["ads", "per-run"]
    assert rows[0]["describes"].startswith("amount spent in total <= 100 on ads.buy; file store")
    assert rows[1]["describes"].startswith("amount spent per saga per 60 s window <= 20")
    before = manifest["enforced_before_effect"]
    assert any(line.startswith("gate: 2 rule(s) (2 budget(s)") for line in before)
    assert any("stays held" in line for line in manifest["not_claimed"])
    assert any("memory store are per process" in line for line in manifest["not_claimed"])


def test_bad_budget_declarations() -> None:
    with pytest.raises(ConfigurationError, match="name"):
        Budget("../etc", 1, store="memory")
    with pytest.raises(ConfigurationError, match="finite"):
        Budget("b", float("inf"), store="memory")
    with pytest.raises(ConfigurationError, match="per"):
        Budget("b", 1, per="agent", store="memory")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="store"):
        Budget("b", 1, store="redis://x")


def test_unreadable_budget_state_refuses_and_is_not_ready(home: Path) -> None:
    ledger = Ledger()
    store = FileBudgetStore(home)
    kit, pay = spend_kit(home, Budget("ops", 100, store=store), ledger)
    with kit:
        (home / "budgets").mkdir(parents=True, exist_ok=True)
        (home / "budgets" / "ops.json").write_text("{not json")
        with kit.transaction("t"), pytest.raises(GateRefused, match="reservation failed"):
            pay("x", 1)
        status = kit.status()
        assert not status.ready
        assert "ops.json is not a budget state" in status.checks["gate"]
    assert ledger.count("pay") == 0


# -- concurrency: 8 threads and 2 processes against one cap ------------------------------------

CHILD = textwrap.dedent(
    """
    import json, os, sys, time
    from agent_saga import AgentKit, Budget, GateRefused, SagaRolledBack, FileBudgetStore

    shared, home, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    budget = Budget("fleet", 150, store=FileBudgetStore(shared))
    print("ready", flush=True)
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(shared, "go")) and time.monotonic() < deadline:
        time.sleep(0.001)
    spent = refused = 0
    with AgentKit(home=home, store="memory", rules=[budget]) as kit:

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
    print(json.dumps({"spent": spent, "refused": refused}))
    """
)


def spend_in_threads(kit: AgentKit, pay: Any, threads: int, rounds: int) -> tuple[int, int]:
    totals = {"spent": 0, "refused": 0}
    lock = threading.Lock()
    start = threading.Barrier(threads)

    def worker() -> None:
        start.wait()
        for i in range(rounds):
            try:
                with kit.transaction("thread"):
                    pay("x", 1)
                    if i % 4 == 3:
                        raise RuntimeError("roll back")
                with lock:
                    totals["spent"] += 1
            except SagaRolledBack as exc:
                if isinstance(exc.cause, GateRefused):
                    with lock:
                        totals["refused"] += 1

    workers = [threading.Thread(target=worker) for _ in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    return totals["spent"], totals["refused"]


def start_children(shared: str, tmp: Path, rounds: int) -> list[subprocess.Popen[str]]:
    script = tmp / "child.py"
    script.write_text(CHILD)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    return [
        subprocess.Popen(
            [sys.executable, str(script), shared, str(tmp / f"child{n}"), str(rounds)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for n in range(2)
    ]


def wait_ready(children: list[subprocess.Popen[str]]) -> None:
    for child in children:
        assert child.stdout is not None
        assert child.stdout.readline() == "ready\n"


def child_totals(children: list[subprocess.Popen[str]]) -> tuple[int, int]:
    spent = refused = 0
    for child in children:
        out, err = child.communicate(timeout=240)
        assert child.returncode == 0, err
        answer = json.loads(out)
        spent += answer["spent"]
        refused += answer["refused"]
    return spent, refused


def test_eight_threads_and_two_processes_never_exceed_the_cap(home: Path, tmp_path: Path) -> None:
    ledger = Ledger()
    budget = Budget("fleet", 150, store=FileBudgetStore(home))
    kit, pay = spend_kit(home, budget, ledger, store="memory")
    home.mkdir(parents=True, exist_ok=True)
    children = start_children(str(home), tmp_path, 60)
    wait_ready(children)
    (home / "go").touch()  # the processes and the threads start spending together
    with kit:
        spent, refused = spend_in_threads(kit, pay, 8, 15)
    child_spent, child_refused = child_totals(children)
    total, held = budget.usage()
    assert held == 0
    assert total == spent + child_spent  # every committed spend counted, nothing else
    assert total <= 150
    assert refused + child_refused > 0  # the cap was reached: 240 attempts, 180 would commit
    assert spent > 0
    assert child_spent > 0
    assert ledger.count("refund") == ledger.count("pay") - spent


def test_memory_store_holds_the_cap_across_threads(home: Path) -> None:
    ledger = Ledger()
    budget = Budget("mem", 25, store=MemoryBudgetStore())
    kit, pay = spend_kit(home, budget, ledger, store="memory")
    with kit:
        spent, refused = spend_in_threads(kit, pay, 8, 10)
    assert budget.usage() == (Decimal(spent), Decimal(0))
    assert spent == 25
    assert refused > 0


# -- a crash between the reservation and its settlement -----------------------------------------

CRASHER = textwrap.dedent(
    """
    import os, sys
    from agent_saga import AgentKit, Budget, FileBudgetStore

    home, committed = sys.argv[1], sys.argv[2] == "commit"
    kit = AgentKit(home=home, rules=[Budget("ops", 100, store=FileBudgetStore(home))])

    @kit.compensator("crash.refund")
    def refund(amount):
        pass

    @kit.tool(name="crash.pay", compensate="crash.refund")
    def pay(amount: int) -> int:
        return amount

    with kit.transaction("dies"):
        pay(40)
        if not committed:
            os._exit(9)  # dead between the reservation and the saga's end
    """
)


def test_recovery_releases_a_dead_process_reservation(home: Path, tmp_path: Path) -> None:
    script = tmp_path / "crasher.py"
    script.write_text(CRASHER)
    result = subprocess.run(
        [sys.executable, str(script), str(home), "crash"], capture_output=True, check=False
    )
    assert result.returncode == 9
    budget = Budget("ops", 100, store=FileBudgetStore(home))
    assert budget.usage() == (Decimal(0), Decimal(40))  # still held: counted, fail safe
    with AgentKit(home=home, rules=[budget]) as kit:

        @kit.compensator("crash.refund")
        def refund(amount: int) -> None:
            pass

        report = kit.recover()
        assert [s.status.value for s in report.recovered] == ["rolled_back"]
    assert budget.usage() == (Decimal(0), Decimal(0))


def test_reconcile_commits_the_reservation_of_a_saga_that_committed(home: Path) -> None:
    store = FileBudgetStore(home)
    budget = Budget("ops", 100, store=store)
    with AgentKit(home=home, rules=[budget], ids=SequentialIds()) as kit:

        @kit.tool(name="pay", semantics=REVERSIBLE)
        def pay(amount: int) -> None:
            pass

        with kit.transaction("t"):
            pay(25)
        assert budget.usage() == (Decimal(25), Decimal(0))
        # a process that died after the saga's end record, before settling: held again
        from decimal import Decimal as D

        answer = store.reserve(
            "ops", "all", D(5), D(100), saga="saga-0001", ordinal=1, keep_spent=True, until=None
        )
        assert answer.hold_id is not None
        orphan = store.reserve(
            "ops", "all", D(7), D(100), saga="not-in-log", ordinal=1, keep_spent=True, until=None
        )
        assert orphan.hold_id is not None
        kit.recover()
    assert budget.usage() == (Decimal(30), Decimal(7))  # unknown saga: kept, counted


def test_the_recover_command_settles_file_budgets_it_has_no_rule_for(
    home: Path, tmp_path: Path
) -> None:
    module = tmp_path / "crashtools.py"
    module.write_text(
        textwrap.dedent(
            """
            from agent_saga import compensator

            @compensator("crash.refund")
            def refund(amount):
                pass
            """
        )
    )
    script = tmp_path / "crasher.py"
    script.write_text(
        "import crashtools\n"
        + CRASHER.replace('@kit.compensator("crash.refund")\ndef refund(amount):\n    pass\n', "")
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, str(script), str(home), "crash"], capture_output=True, check=False, env=env
    )
    assert result.returncode == 9, result.stderr
    budget = Budget("ops", 100, store=FileBudgetStore(home))
    assert budget.usage() == (Decimal(0), Decimal(40))
    cli = "import sys; from agent_saga.cli import main; sys.exit(main())"
    recovered = subprocess.run(
        [sys.executable, "-c", cli, "--home", str(home), "recover", "--import", "crashtools"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr
    assert budget.usage() == (Decimal(0), Decimal(0))


def test_the_reservation_is_on_disk_before_the_tool_runs(home: Path) -> None:
    seen: list[tuple[Decimal, Decimal]] = []
    with AgentKit(home=home, rules=[Budget("ops", 100, store=FileBudgetStore(home))]) as kit:

        @kit.tool(name="pay", compensate=lambda result: None)
        def pay(amount: int) -> None:
            # another process's view: a fresh store reading the state file now
            seen.append(FileBudgetStore(home).usage("ops", "all"))

        with kit.transaction("t"):
            pay(35)
    assert seen == [(Decimal(0), Decimal(35))]
    assert FileBudgetStore(home).usage("ops", "all") == (Decimal(35), Decimal(0))
