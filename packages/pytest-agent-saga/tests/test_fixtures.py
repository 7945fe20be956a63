"""The plugin's registration and fixtures, in a user's suite (``pytester``) and directly."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from agent_saga import (
    AgentKit,
    ConfigurationError,
    FakeClock,
    MemoryLogStore,
    SagaRolledBack,
    default_kit,
    saga_scope,
    tool,
)
from pytest_agent_saga import ScriptedTool

pytest_plugins = ["pytester"]

Run = Callable[..., pytest.RunResult]
Make = Callable[..., ScriptedTool]


def test_options_are_in_their_own_group_and_the_marker_is_registered(run: Run) -> None:
    help_text = run("--help").stdout.str()
    assert "agent-saga transactions:" in help_text
    assert "--saga-faults=KINDS" in help_text
    assert "saga_faults (string):" in help_text
    markers = run("--markers").stdout.str()
    assert "@pytest.mark.saga_chaos(faults=None, skip=()):" in markers


def test_the_marker_passes_strict_markers(pytester: pytest.Pytester, run: Run) -> None:
    pytester.makepyfile(
        """
import pytest

@pytest.mark.saga_chaos(faults=["exception"])
def test_marked():
    pass
"""
    )
    run("--strict-markers").assert_outcomes(passed=1)


def test_homes_kill_switches_and_logs_do_not_leak_between_tests(
    pytester: pytest.Pytester, run: Run
) -> None:
    pytester.makepyfile(
        test_leak="""
import os
from pathlib import Path

import pytest
from agent_saga import AgentKit, HaltedError, saga_scope, tool

SEEN = []
BEFORE = os.environ.get("AGENT_SAGA_HOME")


@tool(name="crm.note", semantics="reversible")
def note(text):
    return text


@pytest.mark.parametrize("round", [1, 2])
def test_each_test_has_its_own_home(round, saga_kit, saga_home):
    SEEN.append(saga_home)
    assert os.environ["AGENT_SAGA_HOME"] == str(saga_home)
    assert saga_kit.status().ready, saga_kit.status()
    with saga_scope("note"):  # the module-level API routes to this test's kit
        note(f"round {round}")
    sagas = [r.saga for r in saga_kit.store.records() if r.kind == "saga.begin"]
    assert sagas == ["saga-0001"]  # nothing from the other round
    saga_kit.halt("stop the world")  # the kill switch is this home's HALT file
    with pytest.raises(HaltedError):
        with AgentKit() as plain:  # a kit built with no arguments uses this home too
            with plain.transaction("x"):
                pass


def test_afterwards():
    assert len(set(SEEN)) == 2
    assert os.environ.get("AGENT_SAGA_HOME") == BEFORE  # restored, whatever it was
    assert not Path(".agent-saga").exists()
    assert all((home / "HALT").exists() for home in SEEN)
"""
    )
    run().assert_outcomes(passed=3)


def test_budgets_kept_in_the_home_do_not_leak_between_tests(
    pytester: pytest.Pytester, run: Run
) -> None:
    pytester.makepyfile(
        test_budget="""
import pytest
from agent_saga import AgentKit, Budget, SagaRolledBack

@pytest.mark.parametrize("round", [1, 2])
def test_spend(round, saga_home):
    budget = Budget("spend", 10)  # its state lives in this test's home
    with AgentKit(rules=[budget]) as kit:
        @kit.tool(name="pay.charge", compensate=lambda: None)
        def charge(amount):
            pass

        with kit.transaction("t"):
            charge(8)
        # Over the limit within this test, and only 8 spent: nothing from the other round.
        with pytest.raises(SagaRolledBack, match=r"refused by spend: .*\\(8 spent, 0 held\\)"):
            with kit.transaction("t"):
                charge(8)
    assert (saga_home / "budgets").is_dir()
"""
    )
    run().assert_outcomes(passed=2)


def test_the_working_directory_and_configured_stores_are_left_alone(
    pytester: pytest.Pytester, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(
        test_cwd="""
import os
from pathlib import Path

def test_it(saga_kit, saga_home):
    assert "AGENT_SAGA_STORE" not in os.environ
    assert saga_kit.store.kind == "file"
    with saga_kit.transaction("t"):
        pass
    assert (saga_home / "log.jsonl").exists()
    assert not Path(".agent-saga").exists()
"""
    )
    monkeypatch.setenv("AGENT_SAGA_STORE", "memory")  # the inner run must not log there
    run().assert_outcomes(passed=1)


USERS_SHELL = {
    "AGENT_SAGA_HOME": "/home/someone/.agent-saga",
    "AGENT_SAGA_STORE": "memory",
    "AGENT_SAGA_KEY_PASSPHRASE": "the-users-passphrase",
    "FORCE_COLOR": "1",
    "TERM": "xterm-256color",
    "COLUMNS": "37",
    "AGENT_SAGA_TEST_PG_URL": "postgresql://user@127.0.0.1:5432/their_tests",
}


def test_the_users_shell_settings_never_reach_a_saga_home_test_and_come_back_after(
    pytester: pytest.Pytester, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in USERS_SHELL.items():
        monkeypatch.setenv(name, value)
    pytester.makepyfile(
        test_shell=f"""
import os
import subprocess
import sys

from agent_saga import AgentKit
from agent_saga.cli import main
from click.testing import CliRunner

SHELL = {USERS_SHELL!r}
SEEN = "import os; print(sorted(n for n in {sorted(USERS_SHELL)!r} if n in os.environ))"


def test_saga_home_sees_only_its_home_and_the_test_database(saga_home):
    assert os.environ["AGENT_SAGA_HOME"] == str(saga_home)
    assert [n for n in SHELL if os.environ.get(n) == SHELL[n]] == ["AGENT_SAGA_TEST_PG_URL"]
    child = subprocess.run([sys.executable, "-c", SEEN], capture_output=True, text=True)
    assert child.stdout.split() == ["['AGENT_SAGA_HOME',", "'AGENT_SAGA_TEST_PG_URL']"]


def test_a_kit_built_with_no_arguments_logs_in_the_test_home(saga_home):
    with AgentKit() as kit, kit.transaction("t"):
        pass
    assert (saga_home / "log.jsonl").is_file()  # the shell said AGENT_SAGA_STORE=memory


def test_the_command_line_prints_plain_text(saga_kit):
    with saga_kit.transaction("t"):
        pass
    result = CliRunner().invoke(main, ["sagas"])
    assert result.exit_code == 0, result.output
    assert "saga-0001" in result.stdout
    assert "\\x1b" not in result.stdout  # the shell said FORCE_COLOR=1


def test_afterwards_the_shell_is_back():
    assert {{n: os.environ.get(n) for n in SHELL}} == SHELL
"""
    )
    run().assert_outcomes(passed=4)
    assert {name: os.environ.get(name) for name in USERS_SHELL} == USERS_SHELL


def test_a_test_without_fixtures_does_not_import_agent_saga(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
import sys

def test_plain():
    assert "pytest_agent_saga.plugin" in sys.modules
    assert "agent_saga" not in sys.modules
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:langsmith_plugin", "-W", "error")
    result.assert_outcomes(passed=1)


def test_saga_kit_runs_on_the_fake_clock_and_names_sagas_in_order(
    saga_kit: AgentKit, saga_clock: FakeClock
) -> None:
    saga_clock.advance(90)
    with saga_kit.transaction("first") as first, saga_kit.transaction("nested"):
        pass
    with saga_kit.transaction("second") as second:
        pass
    assert (first.id, second.id) == ("saga-0001", "saga-0002")
    stamps = {r.ts for r in saga_kit.store.records()}
    assert stamps == {int((1_700_000_000.0 + 90) * 1000)}


def test_saga_memory_store_makes_the_kit_log_in_memory(
    saga_kit: AgentKit, saga_memory_store: MemoryLogStore, saga_home: Path
) -> None:
    assert saga_kit.store is saga_memory_store
    with saga_kit.transaction("t"):
        pass
    assert [r.kind for r in saga_memory_store.records()] == ["saga.begin", "saga.end"]
    assert not (saga_home / "log.jsonl").exists()


def test_module_level_api_uses_the_test_kit(saga_kit: AgentKit) -> None:
    assert default_kit() is saga_kit

    @saga_scope("wrapped")
    def wrapped() -> None:
        pass

    wrapped()
    assert [r.data.get("name") for r in saga_kit.store.records() if r.kind == "saga.begin"] == [
        "wrapped"
    ]


def test_compensators_of_one_test_do_not_clash_with_anothers(saga_kit: AgentKit) -> None:
    @saga_kit.compensator("fx.refund")
    def refund() -> None:
        pass

    assert saga_kit.runtime.registry.get("fx.refund") is refund


def test_compensators_of_one_test_do_not_clash_with_anothers_2(saga_kit: AgentKit) -> None:
    calls: list[str] = []

    @saga_kit.compensator("fx.refund")
    def other_refund() -> None:
        calls.append("refund")

    @saga_kit.tool(name="fx.charge", compensate="fx.refund")
    def charge() -> None:
        pass

    with pytest.raises(SagaRolledBack), saga_kit.transaction("t"):
        charge()
        raise RuntimeError("fail")
    assert calls == ["refund"]


def test_process_wide_compensators_are_still_found(saga_kit: AgentKit) -> None:
    from agent_saga import compensator

    undone: list[int] = []

    @compensator("plugin_test.global_undo")
    def undo(amount: int) -> None:
        undone.append(amount)

    @tool(name="plugin_test.global_charge", compensate="plugin_test.global_undo")
    def charge(amount: int) -> None:
        pass

    with pytest.raises(SagaRolledBack), saga_kit.transaction("t"):
        charge(3)
        raise RuntimeError("fail")
    assert undone == [3]
    assert "plugin_test.global_undo" in saga_kit.runtime.registry.names()


def test_scripted_tools_return_or_raise_per_call_and_record_keys(
    saga_kit: AgentKit, saga_scripted_tool: Make
) -> None:
    flaky = saga_scripted_tool(
        "pay.charge", TimeoutError("gateway"), {"id": "ch_1"}, params=["amount", "currency"]
    )
    with pytest.raises(SagaRolledBack) as caught, saga_kit.transaction("first"):
        flaky(5, currency="EUR")
    assert isinstance(caught.value.cause, TimeoutError)
    with saga_kit.transaction("second"):
        assert flaky(amount=7, currency="EUR") == {"id": "ch_1"}
        assert flaky(1, "USD") is None  # the script ran out: ``then``
    assert [c.args for c in flaky.calls] == [
        {"amount": 5, "currency": "EUR"},
        {"amount": 7, "currency": "EUR"},
        {"amount": 1, "currency": "USD"},
    ]
    keys = [c.idempotency_key for c in flaky.calls]
    assert all(k and k.startswith("as1-") for k in keys)
    assert len(set(keys)) == 3
    assert flaky.calls[1].result == {"id": "ch_1"}
    assert flaky.undone == []  # the failed call had no effect to undo
    assert repr(flaky) == "ScriptedTool('pay.charge', calls=3, undone=0)"


def test_scripted_compensations_are_recorded_and_can_fail(
    saga_kit: AgentKit, saga_scripted_tool: Make
) -> None:
    book = saga_scripted_tool("trip.book", "B1", params=["city"], undo_outcomes=[OSError("down")])
    charge = saga_scripted_tool("trip.charge", "C1", params=["amount"])
    with pytest.raises(SagaRolledBack) as caught, saga_kit.transaction("trip"):
        book("Oslo")
        charge(300)
        raise RuntimeError("the agent gave up")
    report = caught.value.report
    assert [f.step.tool for f in report.failed] == ["trip.book"]
    assert charge.undone[0].args == {"amount": 300}
    assert charge.undone[0].result == "C1"
    assert charge.undone[0].idempotency_key == f"{charge.calls[0].idempotency_key}/compensate"
    assert book.undone[0].args == {"city": "Oslo"}


def test_scripted_tool_declarations_are_checked(saga_kit: AgentKit) -> None:
    with pytest.raises(ValueError, match="invalid parameter name"):
        ScriptedTool(saga_kit, "x.y", params=["not valid"])
    with pytest.raises(ValueError, match="invalid parameter name"):
        ScriptedTool(saga_kit, "x.y", params=["idempotency_key"])
    with pytest.raises(ConfigurationError, match="COMPENSABLE tool needs compensate"):
        ScriptedTool(saga_kit, "x.y", undo=False, semantics="compensable")
    plain = ScriptedTool(saga_kit, "x.z", [1], undo=False, semantics="reversible")
    assert plain() == 1  # outside a transaction the tool runs untouched


def test_the_plugin_imports_only_pytest() -> None:
    code = (
        "import sys; import pytest_agent_saga.plugin; "
        "print(sorted(m for m in sys.modules if m.startswith('agent_saga')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
