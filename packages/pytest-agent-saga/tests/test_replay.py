"""``assert_replay_deterministic`` fails on every kind of divergence, and names the first step.

This is the failure mode "the pytest 'determinism' assertion never failed, whatever it was given"
(``failure-modes.md``): each test here gives it a transaction whose step sequence changes
between runs (a counter, the time, random choices, set iteration, an early exit, an extra step)
and checks that it fails with a message naming the first differing step.
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from agent_saga import AgentKit, FakeClock, SequentialIds
from agent_saga.testing import Ledger
from pytest_agent_saga import ReplayDivergence, ScriptedTool, assert_replay_deterministic

pytest_plugins = ["pytester"]


class Shop:
    """Two scripted tools declared in a kit of the test's own."""

    def __init__(self, kit: AgentKit) -> None:
        self.reserve = ScriptedTool(kit, "shop.reserve", params=["item"])
        self.charge = ScriptedTool(kit, "shop.charge", params=["amount"])
        self.registry = kit.runtime.registry


@pytest.fixture
def shop(saga_kit: AgentKit) -> Shop:
    return Shop(saga_kit)


def fails_with(transaction: Callable[[], None], shop: Shop, pattern: str, **kw: object) -> str:
    with pytest.raises(AssertionError) as caught:
        assert_replay_deterministic(transaction, registry=shop.registry, **kw)  # type: ignore[arg-type]
    message = str(caught.value)
    assert re.search(pattern, message), message
    return message


def test_a_deterministic_transaction_passes_and_returns_the_recorded_steps(shop: Shop) -> None:
    def checkout() -> None:
        shop.reserve("book")
        shop.charge(12)

    steps = assert_replay_deterministic(checkout, registry=shop.registry, runs=3)
    assert [(s.ordinal, s.tool, s.args) for s in steps] == [
        (1, "shop.reserve", {"item": "book"}),
        (2, "shop.charge", {"amount": 12}),
    ]
    assert shop.charge.call_count == 4  # the record and three replays


def test_arguments_that_change_between_runs_fail_at_that_step(shop: Shop) -> None:
    amounts = itertools.count(12)

    def checkout() -> None:
        shop.reserve("book")
        shop.charge(next(amounts))

    message = fails_with(checkout, shop, r"at step #2: ")
    assert message == (
        "replay 1 of transaction 'checkout' diverged from the recorded run at step #2: step #2 "
        "was shop.charge(amount=13) here and shop.charge(amount=12) in the recorded run"
    )


def test_a_step_chosen_by_the_clock_fails_before_its_effect(shop: Shop) -> None:
    clock = FakeClock()

    def checkout() -> None:
        shop.reserve("book")
        clock.advance(3600)
        if int(clock.now()) // 3600 % 2:
            shop.charge(12)
        else:
            shop.reserve("bookmark")

    fails_with(checkout, shop, r"at step #2: step #2 was shop\.\w+\(.*\) here and shop\.")
    # The divergent call was stopped before its effect: one reserve per run, one charge.
    assert [c.args for c in shop.reserve.calls] == [{"item": "book"}, {"item": "book"}]
    assert shop.charge.call_count == 1
    # The replayed first step was compensated when the replay stopped.
    assert len(shop.reserve.undone) == 1


def test_random_choices_fail(shop: Shop) -> None:
    seeds = itertools.count(1)

    def checkout() -> None:
        rng = random.Random(next(seeds))
        for item in rng.sample(["a", "b", "c", "d", "e", "f"], 3):
            shop.reserve(item)

    fails_with(checkout, shop, r"at step #\d: step #\d was shop\.reserve\(item=")


def test_set_iteration_order_that_differs_fails(saga_home: Path) -> None:
    kit = AgentKit(store="memory", ids=SequentialIds())
    tools = {name: ScriptedTool(kit, f"crm.{name}") for name in ("ann", "bob", "cy")}
    orders = itertools.cycle([["ann", "bob", "cy"], ["cy", "bob", "ann"]])

    def notify() -> None:
        for name in next(orders):  # as iterating a set of objects hashed by id may do
            tools[name]()

    with pytest.raises(AssertionError, match=r"at step #1: step #1 was crm\.cy\(\) here and "):
        assert_replay_deterministic(notify, registry=kit.runtime.registry)
    kit.close()


def test_a_replay_that_stops_early_names_the_missing_step(shop: Shop) -> None:
    runs = itertools.count()

    def checkout() -> None:
        shop.reserve("book")
        if next(runs) == 0:
            shop.charge(12)

    fails_with(
        checkout,
        shop,
        r"at step #2: the replay ended after 1 step\(s\) and never called "
        r"shop\.charge\(amount=12\)$",
    )


def test_an_extra_step_in_the_replay_fails(shop: Shop) -> None:
    runs = itertools.count()

    def checkout() -> None:
        shop.reserve("book")
        if next(runs):
            shop.charge(12)

    fails_with(
        checkout,
        shop,
        r"at step #2: step #2 shop\.charge\(amount=12\) ran in the replay; the recorded run "
        r"has no such step",
    )


def test_arguments_can_be_left_out_of_the_comparison(shop: Shop) -> None:
    amounts = itertools.count(12)

    def checkout() -> None:
        shop.charge(next(amounts))

    assert_replay_deterministic(checkout, registry=shop.registry, compare_args=False)
    fails_with(checkout, shop, r"shop\.charge\(amount=\d+\) here")


def test_replay_against_a_log_recorded_elsewhere(saga_kit: AgentKit, saga_home: Path) -> None:
    ledger = Ledger()

    @saga_kit.tool(name="pay.charge", semantics="reversible")
    def charge(amount: int) -> None:
        ledger.record("charge")

    @saga_kit.tool(name="pay.notify", semantics="reversible")
    def notify(to: str) -> None:
        ledger.record("notify")

    with saga_kit.transaction("pay"):
        charge(5)
        notify("ada")
    assert_replay_deterministic(lambda: (charge(5), notify("ada")), recorded=saga_home)
    with pytest.raises(AssertionError, match=r"step #2 was pay\.charge\(amount=5\) here and "):
        assert_replay_deterministic(lambda: (charge(5), charge(5)), recorded=saga_kit)
    with pytest.raises(AssertionError, match="no saga to replay"):
        assert_replay_deterministic(lambda: None, recorded=[])
    with pytest.raises(ValueError, match="runs must be at least 1"):
        assert_replay_deterministic(lambda: None, runs=0)


def test_a_transaction_without_steps_cannot_pass_by_comparing_nothing(shop: Shop) -> None:
    fails_with(lambda: None, shop, r"^the recorded run of transaction '<lambda>' made no tool call")


def test_the_divergence_is_raised_inside_the_run_even_if_the_agent_swallows_it(
    shop: Shop,
) -> None:
    amounts = itertools.count(12)
    swallowed: list[BaseException] = []

    def checkout() -> None:
        try:
            shop.charge(next(amounts))
        except ReplayDivergence as exc:  # an agent loop that turns errors into messages
            swallowed.append(exc)

    fails_with(checkout, shop, r"at step #1: step #1 was shop\.charge\(amount=13\) here")
    assert len(swallowed) == 1


def test_a_users_test_fails_with_the_step_in_its_report(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_agent="""
import time
from pytest_agent_saga import assert_replay_deterministic

def test_agent(saga_scripted_tool):
    search = saga_scripted_tool("web.search", params=["query"], semantics="reversible")

    def agent():
        search("flights " + str(time.monotonic_ns()))

    assert_replay_deterministic(agent)
"""
    )
    result = pytester.runpytest("-p", "no:langsmith_plugin", "-W", "error")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "E * replay 1 of transaction 'agent' diverged from the recorded run at step #1: step "
            '#1 was web.search(query="flights *") here and web.search(query="flights *") in the '
            "recorded run"
        ]
    )
