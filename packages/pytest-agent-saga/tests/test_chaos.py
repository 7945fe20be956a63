"""The chaos runner, as a user's test suite sees it (``pytester``).

A shop transaction reserves an item and charges a card; its effects land in the ``saga_ledger``
(a journal file, so a killed child's effects are seen too). Each variant plants one bug a user
actually has, and the user's test must fail with a message naming the fault point, the step
and the broken invariant; the correct shop passes every fault point.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
from agent_saga import AgentKit, Entry, saga_scope
from pytest_agent_saga import (
    FAULT_KINDS,
    Baseline,
    ChaosRunner,
    FaultPoint,
    Injector,
    JournalLedger,
    ScriptedTool,
    register_fault_kind,
)

Run = Callable[..., pytest.RunResult]
Make = Callable[..., ScriptedTool]

pytest_plugins = ["pytester"]

SHOP = """
import itertools
import pytest

COUNTER = itertools.count(12)


@pytest.fixture
def shop(saga_kit, saga_ledger):
    ledger = saga_ledger

    def once(action, key):
        if not ledger.count(action, key):
            ledger.record(action, key)

    @saga_kit.compensator("shop.release")
    def release(idempotency_key):
        once("release", idempotency_key)

    @saga_kit.compensator("shop.refund")
    def refund(idempotency_key):
        REFUND

    def reserved(idempotency_key, item):
        return ledger.count("reserve", idempotency_key) > 0

    def charged(idempotency_key, amount):
        return ledger.count("charge", idempotency_key) > 0

    @saga_kit.tool(name="shop.reserve", RESERVE_DECLARATION)
    def reserve(item, idempotency_key):
        once("reserve", idempotency_key)

    @saga_kit.tool(name="shop.charge", compensate="shop.refund", probe=charged)
    def charge(amount, idempotency_key):
        CHARGE

    def checkout():
        reserve("book")
        charge(AMOUNT)

    return checkout
"""

CORRECT = {
    "REFUND": 'once("refund", idempotency_key)',
    "RESERVE_DECLARATION": 'compensate="shop.release", probe=reserved',
    "CHARGE": 'once("charge", idempotency_key)',
    "AMOUNT": "12",
}


def shop(**bugs: str) -> str:
    source = SHOP
    for placeholder, code in {**CORRECT, **bugs}.items():
        source = source.replace(placeholder, code)
    return source


def write_shop(pytester: pytest.Pytester, test: str, **bugs: str) -> None:
    pytester.makepyfile(test_shop=shop(**bugs) + test)


RUN_ALL = """
def test_checkout(shop, saga_chaos):
    saga_chaos.run(shop)
"""


def test_a_correct_transaction_passes_every_fault_point(
    pytester: pytest.Pytester, run: Run
) -> None:
    write_shop(
        pytester,
        """
def test_checkout(shop, saga_chaos, saga_ledger):
    report = saga_chaos.run(shop)
    assert report.ok
    kinds = sorted({r.kind for r in report.results})
    print("kinds", ",".join(kinds), "points", len(report.results), "skipped", report.skipped)
    # Charges left standing: the clean run, the run killed after its commit, the two duplicate
    # deliveries (committed runs), and the run whose refund was made to fail.
    assert saga_ledger.count("charge") - saga_ledger.count("refund") == 5
""",
    )
    result = run("-s")
    result.assert_outcomes(passed=1)
    # 2 steps: 4 exception, 2 compensation, 16 kill and 2 duplicate points.
    result.stdout.fnmatch_lines(
        ["*kinds compensation,duplicate,exception,kill points 24 skipped []"]
    )


def test_a_missing_compensation_fails_naming_the_step_and_fault_point(
    pytester: pytest.Pytester, run: Run
) -> None:
    write_shop(pytester, RUN_ALL, RESERVE_DECLARATION='semantics="reversible"')
    result = run()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*- fault point: an exception at step #2 shop.charge, before its effect*",
            "*broke: every committed effect is compensated after a rollback",
            "*step #1 shop.reserve took effect (ledger: reserve) and nothing undid it: it "
            "declares no compensation (reversible)",
        ]
    )
    result.stdout.fnmatch_lines(["*SIGKILL right after log write 3 (step.done of step #1 *"])


def test_a_compensation_that_is_not_idempotent_fails_after_a_kill_in_the_rollback(
    pytester: pytest.Pytester, run: Run
) -> None:
    write_shop(pytester, RUN_ALL, REFUND='ledger.record("refund", idempotency_key)')
    result = run()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*- fault point: SIGKILL right before log write 8 (compensation.done of step #2 "
            "shop.charge), in the rollback, then recovery (saga: rolled_back)",
            "*broke: each idempotency key takes effect at most once",
            "*the compensation of step #2 shop.charge took effect 2 times (ledger: 'refund'*",
        ]
    )
    # Only the points where recovery runs the compensation again break it.
    assert "exception at step" not in result.stdout.str()


def test_a_nondeterministic_step_fails_naming_the_step(pytester: pytest.Pytester, run: Run) -> None:
    write_shop(pytester, RUN_ALL, AMOUNT="next(COUNTER)")
    result = run()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*- fault point: an exception at step #2 shop.charge, after its effect*",
            "*broke: the transaction calls the same steps as in the clean run",
            "*step #2 was shop.charge(amount=1?) here and shop.charge(amount=12) in the clean run",
        ]
    )


def test_a_tool_that_ignores_its_key_fails_on_duplicate_delivery(
    pytester: pytest.Pytester, run: Run
) -> None:
    write_shop(pytester, RUN_ALL, CHARGE='ledger.record("charge", idempotency_key)')
    result = run()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*- fault point: a duplicate delivery of step #2 shop.charge (saga: committed)",
            "*broke: each idempotency key takes effect at most once",
            "*step #2 shop.charge took effect 2 times (ledger: 'charge', key as1-*",
        ]
    )


def test_the_marker_and_the_option_choose_the_fault_kinds(
    pytester: pytest.Pytester, run: Run
) -> None:
    write_shop(
        pytester,
        """
@pytest.mark.saga_chaos(faults=["exception", "compensation"])
def test_marked(shop, saga_chaos):
    report = saga_chaos.run(shop)
    assert {r.kind for r in report.results} == {"exception", "compensation"}


def test_unmarked(shop, saga_chaos):
    saga_chaos.run(shop)


@pytest.mark.saga_chaos(skip=["duplicate", "kill"])
def test_skipping(shop, saga_chaos):
    report = saga_chaos.run(shop)
    assert {r.kind for r in report.results} == {"exception", "compensation"}
""",
        CHARGE='ledger.record("charge", idempotency_key)',
    )
    # The buggy charge is only caught by duplicate delivery.
    run().assert_outcomes(passed=2, failed=1)
    result = run("--saga-faults", "exception,compensation")
    result.assert_outcomes(passed=3)
    result = run("--saga-faults", "exception,power")
    result.assert_outcomes(passed=1, errors=2)
    result.stdout.fnmatch_lines(
        ["*unknown fault kind(s) power; known: exception, compensation, kill, duplicate, approval"]
    )


def test_the_ini_setting_chooses_the_fault_kinds(pytester: pytest.Pytester, run: Run) -> None:
    write_shop(pytester, RUN_ALL, CHARGE='ledger.record("charge", idempotency_key)')
    pytester.makeini("[pytest]\nsaga_faults = exception, kill\n")
    run().assert_outcomes(passed=1)


def test_an_in_memory_world_that_is_not_restored(pytester: pytest.Pytester, run: Run) -> None:
    pytester.makepyfile(
        test_world="""
import pytest

@pytest.mark.saga_chaos(faults=["exception"])
def test_notes(saga_kit, saga_chaos):
    notes = []

    @saga_kit.tool(name="notes.add", semantics="reversible")
    def add(text):
        notes.append(text)

    @saga_kit.tool(name="notes.publish", semantics="reversible", compensate=lambda: None)
    def publish():
        pass

    def transaction():
        add("hello")
        publish()

    saga_chaos.run(transaction, world=lambda: list(notes), reset=notes.clear)
"""
    )
    result = run()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*- fault point: an exception at step #2 notes.publish, before its effect*",
            "*broke: the world after a rollback is as it was before the transaction",
        ]
    )
    detail = "before: []; after: ['hello']; not compensated: step #1 notes.add (declares no "
    assert detail + "compensation)" in result.stdout.str()


def test_callable_compensations_are_not_exercised_and_not_recoverable(
    pytester: pytest.Pytester, run: Run
) -> None:
    pytester.makepyfile(
        test_callable="""
import pytest


@pytest.mark.saga_chaos(skip=["kill"])
def test_in_process(saga_kit, saga_chaos, saga_scripted_tool):
    charge = saga_scripted_tool("pay.charge", {"id": 1}, params=["amount"])
    report = saga_chaos.run(lambda: charge(5), name="pay")
    assert report.ok
    point = "a failing compensation at step #1 pay.charge"
    assert report.skipped == [(point, "its compensation is an in-process callable")]
    assert "not exercised: a failing compensation at step #1 pay.charge" in report.summary()


def test_after_a_crash(saga_kit, saga_chaos, saga_scripted_tool):
    charge = saga_scripted_tool("pay.charge", {"id": 1}, params=["amount"])
    saga_chaos.run(lambda: charge(5), name="pay")
"""
    )
    result = run()
    result.assert_outcomes(passed=1, failed=1)
    # Recovery in another process cannot call an in-process compensation, nor tell whether a
    # call without a probe landed: both are found by the kill points.
    result.stdout.fnmatch_lines(
        [
            "*- fault point: SIGKILL right after log write 2 (step.intent of step #1 pay.charge)*",
            "*broke: recovery settles the saga without a human",
            "*step #1 pay.charge: outcome unknown and the tool has no probe",
            "*- fault point: SIGKILL right after log write 3 (step.done of step #1 pay.charge)*",
            "*broke: recovery settles the saga without a human",
            "*step #1 pay.charge: its compensation is an in-process callable",
        ]
    )


def test_a_transaction_that_fails_without_faults_is_reported(
    pytester: pytest.Pytester, run: Run
) -> None:
    pytester.makepyfile(
        test_broken="""
def test_it(saga_chaos, saga_scripted_tool):
    charge = saga_scripted_tool("pay.charge", TimeoutError("gateway"), params=["amount"])
    saga_chaos.run(lambda: charge(5), name="pay")
"""
    )
    result = run()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*transaction 'pay' does not commit when no fault is injected: SagaRolledBack(*gateway*"]
    )


def test_an_agent_that_retries_a_call_whose_result_was_lost_pays_twice(
    pytester: pytest.Pytester, run: Run
) -> None:
    pytester.makepyfile(
        test_retry="""
import pytest

@pytest.mark.saga_chaos(faults=["exception", "compensation"])
def test_retrying_agent(saga_kit, saga_chaos):
    account = {"charged": 0}

    @saga_kit.compensator("bank.refund")
    def refund(amount):
        account["charged"] -= amount

    @saga_kit.tool(name="bank.charge", compensate="bank.refund")
    def charge(amount):
        account["charged"] += amount

    def agent():
        try:
            charge(12)
        except Exception:  # the agent retries a call that seemed to fail
            charge(12)

    saga_chaos.run(agent, world=lambda: dict(account), reset=lambda: account.update(charged=0))
"""
    )
    result = run()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*- fault point: an exception at step #1 bank.charge, after its effect (the result "
            "never arrives) (saga: committed)",
            "*broke: the world after a committed run is as after a clean run",
            "*after a clean run: {'charged': 12}; after this run: {'charged': 24}",
            "*- fault point: a failing compensation at step #1 bank.charge (saga: committed)",
            "*broke: a failed compensation leaves the saga needing a human",
            "*step #1 bank.charge's compensation never ran: the transaction caught the injected "
            "exception and committed: nothing rolled back",
        ]
    )
    # The retry after an exception *before* the effect is harmless, and passes.
    assert "at step #1 bank.charge, before its effect" not in result.stdout.str()


def test_approvals_are_given_by_the_runner_and_an_expiring_one_is_a_fault_point(
    pytester: pytest.Pytester, run: Run
) -> None:
    # Approvers listed in the project's configuration are not asked: no run waits for a person.
    pytester.makefile(".toml", **{"agent-saga": 'approvers = ["unix:alice"]\n'})
    pytester.makepyfile(
        test_wire="""
import pytest

@pytest.mark.saga_chaos(faults=["approval", "exception"])
def test_wire(saga_kit, saga_chaos):
    booked = []

    @saga_kit.tool(name="bank.hold", compensate=lambda: booked.pop())
    def hold():
        booked.append("hold")

    @saga_kit.tool(name="bank.wire", semantics="irreversible")
    def wire(amount):
        booked.append("wire")

    report = saga_chaos.run(lambda: (hold(), wire(5_000_000)), name="wire", fail=False)
    for result in report.results:
        details = [v.detail for v in result.violations]
        print("POINT", result.label, "|", result.outcome, "|", details)
"""
    )
    result = run("-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            # The withheld approval expires: the wire is refused and the hold undone.
            "*POINT an approval that expires at step #2 bank.wire | rolled_back | []",
            # An IRREVERSIBLE step that ran before the transaction failed cannot be undone:
            # the saga ends needs_human and the runner names the effect left in place.
            "POINT an exception at step #2 bank.wire, after its effect (the result never "
            "arrives) | needs_human | ['step #2 bank.wire committed and declares no compensation']",
        ]
    )
    assert "POINT an exception at step #2 bank.wire, before its effect | rolled_back | []" in (
        result.stdout.str()
    )


class TimeoutKind:
    """A fault kind of a user's own: the gateway times out before each step's effect."""

    name = "timeout"
    description = "a timeout before each step"

    def points(self, baseline: Baseline) -> tuple[list[FaultPoint], list[tuple[str, str]]]:
        return [
            FaultPoint(self.name, f"a timeout at step #{s.ordinal}", RaiseAtTimeout(s.ordinal))
            for s in baseline.steps
        ], []


class RaiseAtTimeout(Injector):
    def __init__(self, ordinal: int) -> None:
        self.ordinal = ordinal

    def before_write(self, number: int, entries: Sequence[Entry]) -> None:
        if any(e.kind == "step.intent" and e.data.get("ordinal") == self.ordinal for e in entries):
            raise TimeoutError("gateway timed out")


def test_fault_kinds_are_pluggable(
    monkeypatch: pytest.MonkeyPatch, saga_kit: AgentKit, saga_scripted_tool: Make
) -> None:
    monkeypatch.setitem(FAULT_KINDS, "timeout", TimeoutKind())  # removed again at teardown
    register_fault_kind(TimeoutKind())
    book = saga_scripted_tool("trip.book", "B1", params=["city"])
    pay = saga_scripted_tool("trip.pay", "P1", params=["amount"])
    runner = ChaosRunner(saga_kit.home / "runs", saga_kit.runtime.registry, ["timeout"])
    report = runner.run(lambda: (book("Oslo"), pay(3)), name="trip")
    assert [(r.label, r.outcome, r.violations) for r in report.results] == [
        ("a timeout at step #1", "rolled_back", []),
        ("a timeout at step #2", "rolled_back", []),
    ]
    # Undone in the baseline run that fails after its last step, and when step 2 timed out.
    assert [c.args for c in book.undone] == [{"city": "Oslo"}] * 2
    assert len(pay.undone) == 1
    with pytest.raises(ValueError, match="identifier name"):
        register_fault_kind(type("Bad", (TimeoutKind,), {"name": "not valid"})())
    with pytest.raises(ValueError, match=r"unknown fault kind\(s\) nope"):
        ChaosRunner(saga_kit.home, saga_kit.runtime.registry, ["nope"])


def test_a_transaction_outside_the_runners_log_cannot_pass_by_testing_nothing(
    saga_chaos: ChaosRunner, saga_kit: AgentKit, saga_scripted_tool: Make
) -> None:
    calls: list[int] = []
    with AgentKit(store="memory", home=saga_kit.home) as own:

        @own.tool(name="pay.note", semantics="reversible")
        def note(amount: int) -> None:
            calls.append(amount)

        def transaction() -> None:
            with own.transaction("mine"):  # a kit of the test's own: not the runner's log
                note(5)

        with pytest.raises(AssertionError, match="ran no tool call inside the runner's"):
            saga_chaos.run(transaction)
    assert calls == [5]


def test_long_reports_show_the_first_failing_points_in_full(
    saga_kit: AgentKit, saga_scripted_tool: Make, saga_ledger: JournalLedger
) -> None:
    def note(idempotency_key: str = "") -> None:
        saga_ledger.record("note", idempotency_key)  # an effect nothing undoes

    steps = [saga_kit.tool(note, name=f"notes.add{n}", semantics="reversible") for n in range(12)]
    runner = ChaosRunner(
        saga_kit.home / "runs", saga_kit.runtime.registry, ["exception"], saga_ledger
    )
    report = runner.run(lambda: [step() for step in steps], name="notes", fail=False)
    assert len(report.failures) == 23  # every point after the first step's effect
    summary = report.summary()
    assert summary.count("- fault point: ") == 20
    assert summary.endswith("- and 3 more fault point(s); report.failures lists all")


def test_async_tools_and_transactions_run_under_every_fault_kind(
    saga_kit: AgentKit, saga_ledger: JournalLedger, saga_chaos: ChaosRunner
) -> None:
    async def cancel(idempotency_key: str) -> None:
        if not saga_ledger.count("cancel", idempotency_key):
            saga_ledger.record("cancel", idempotency_key)

    saga_kit.compensator("async.cancel", cancel)

    async def booked(idempotency_key: str, room: str) -> bool:
        return saga_ledger.count("book", idempotency_key) > 0

    @saga_kit.tool(name="async.book", compensate="async.cancel", probe=booked)
    async def book(room: str, idempotency_key: str = "") -> str:
        if not saga_ledger.count("book", idempotency_key):
            saga_ledger.record("book", idempotency_key)
        return room

    async def stay() -> None:
        await book("101")
        await book("102")

    report = saga_chaos.run(stay)
    assert {r.kind for r in report.results} == {"exception", "compensation", "kill", "duplicate"}
    assert report.ok


def test_an_agent_that_opens_its_own_saga_scope_runs_as_a_savepoint(
    saga_kit: AgentKit, saga_ledger: JournalLedger, saga_chaos: ChaosRunner
) -> None:
    @saga_kit.compensator("scope.undo")
    def undo(idempotency_key: str) -> None:
        if not saga_ledger.count("undo", idempotency_key):
            saga_ledger.record("undo", idempotency_key)

    def done(idempotency_key: str, n: int) -> bool:
        return saga_ledger.count("do", idempotency_key) > 0

    @saga_kit.tool(name="scope.do", compensate="scope.undo", probe=done)
    def do(n: int, idempotency_key: str = "") -> None:
        if not saga_ledger.count("do", idempotency_key):
            saga_ledger.record("do", idempotency_key)

    @saga_scope("agent")  # as the agent's own code declares its transaction
    def agent() -> None:
        do(1)
        do(2)

    report = saga_chaos.run(agent)
    assert report.ok
    # The savepoint's own rollback is a crash point too.
    assert (
        "SIGKILL right after log write 12 (savepoint.rollback), in the rollback, then recovery"
        in {r.label for r in report.results}
    )


@pytest.mark.saga_chaos(faults=["kill", "approval"])
def test_kill_points_run_through_approvals(
    saga_kit: AgentKit, saga_ledger: JournalLedger, saga_chaos: ChaosRunner
) -> None:
    @saga_kit.compensator("bank.release")
    def release(idempotency_key: str) -> None:
        if not saga_ledger.count("release", idempotency_key):
            saga_ledger.record("release", idempotency_key)

    def held(idempotency_key: str) -> bool:
        return saga_ledger.count("hold", idempotency_key) > 0

    @saga_kit.tool(name="bank.hold", compensate="bank.release", probe=held)
    def hold(idempotency_key: str = "") -> None:
        if not saga_ledger.count("hold", idempotency_key):
            saga_ledger.record("hold", idempotency_key)

    @saga_kit.tool(name="bank.wire", semantics="irreversible")
    def wire(amount: int) -> None:
        saga_ledger.record("wire", "")

    report = saga_chaos.run(lambda: (hold(), wire(9)), name="wire", fail=False)
    labels = [r.label for r in report.results]
    assert "an approval that expires at step #2 bank.wire" in labels
    assert any("approval.decided" in label for label in labels)  # approvals are crash points
    broken = {(v.invariant, v.detail) for r in report.failures for v in r.violations}
    # Only the wire, once it may have run, is beyond any rollback: recovery hands it to a human.
    assert broken == {
        (
            "recovery settles the saga without a human",
            "step #2 bank.wire: irreversible step committed; nothing undoes it",
        ),
        (
            "recovery settles the saga without a human",
            "step #2 bank.wire: outcome unknown and the tool has no probe",
        ),
        (
            "every committed effect is compensated after a rollback",
            "step #2 bank.wire committed and declares no compensation",
        ),
    }
