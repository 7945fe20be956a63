"""Recovery after a real crash: a child process dies (SIGKILL) mid-transaction; another finishes.

The effects land in a ledger directory outside the killed process: one file per
(action, idempotency key), created with O_EXCL, so "charged once, refunded once" is read from
the file system, not from the dead process's memory.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from agent_saga import AgentKit, Kind, SagaStatus, SequentialIds

TOOLS = textwrap.dedent(
    '''
    """Tools of a travel agent whose effects land in a ledger directory."""
    import os, signal
    from pathlib import Path
    from agent_saga import compensator, tool

    LEDGER = Path(os.environ["LEDGER_DIR"])
    CRASH = os.environ.get("CRASH_AT", "")


    def effect(action, key):
        """Record an effect once per key (a real API would dedupe on the idempotency key)."""
        try:
            fd = os.open(LEDGER / f"{action}@{key}", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            os.close(fd)
        except FileExistsError:
            pass
        with open(LEDGER / "journal", "a") as journal:
            journal.write(f"{action} {key}\\n")


    def crash_if(point):
        if CRASH == point:
            os.kill(os.getpid(), signal.SIGKILL)


    @compensator("rt.refund")
    def refund(result, idempotency_key):
        effect("refund", result["charge"])
        crash_if("after-refund")


    @compensator("rt.cancel")
    def cancel(flight, idempotency_key):
        effect("cancel", flight)


    def landed(idempotency_key, amount):
        if (LEDGER / f"charge@{idempotency_key}").exists():
            return {"charge": idempotency_key}
        return False


    @tool(name="rt.reserve", compensate="rt.cancel")
    def reserve(flight, idempotency_key):
        effect("reserve", flight)
        return flight


    @tool(name="rt.charge", compensate="rt.refund", probe=landed)
    def charge(amount, idempotency_key):
        effect("charge", idempotency_key)
        crash_if("after-charge-effect")
        return {"charge": idempotency_key}


    @tool(name="rt.charge_unprobed", compensate="rt.refund")
    def charge_unprobed(amount, idempotency_key):
        effect("charge", idempotency_key)
        crash_if("after-charge-effect")
        return {"charge": idempotency_key}


    @tool(name="rt.email", semantics="reversible")
    def email(to):
        crash_if("in-email")
        raise ConnectionError("mail server down")
    '''
)

AGENT = textwrap.dedent(
    """
    import os, signal, sys
    import rt_tools as t
    from agent_saga import saga_scope

    plan = sys.argv[1]
    with saga_scope("trip"):
        t.reserve("LH400")
        if plan == "unprobed":
            t.charge_unprobed(120)
        else:
            t.charge(120)
        if plan == "kill-after-two":
            os.kill(os.getpid(), signal.SIGKILL)
        t.email("ada@example.com")
    """
)


@pytest.fixture
def world(tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A module of tools importable here and in child processes, and a ledger directory."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "rt_tools.py").write_text(TOOLS)
    (code / "agent.py").write_text(AGENT)
    ledger = tmp_path / "ledger"
    ledger.mkdir()
    monkeypatch.setenv("LEDGER_DIR", str(ledger))
    monkeypatch.syspath_prepend(str(code))
    yield ledger
    sys.modules.pop("rt_tools", None)


def run_agent(world: Path, plan: str, crash_at: str = "") -> int:
    env = {**os.environ, "CRASH_AT": crash_at, "PYTHONPATH": str(world.parent / "code")}
    code = world.parent / "code" / "agent.py"
    return subprocess.run([sys.executable, str(code), plan], env=env, check=False).returncode


def tools() -> ModuleType:
    """Import the user's tools here, as `agent-saga recover --import rt_tools` does."""
    return importlib.import_module("rt_tools")


def count(ledger: Path, action: str) -> int:
    journal = ledger / "journal"
    lines = journal.read_text().splitlines() if journal.exists() else []
    return sum(1 for line in lines if line.split()[0] == action)


def actions(ledger: Path) -> list[str]:
    return [line.split()[0] for line in (ledger / "journal").read_text().splitlines()]


def test_killed_mid_transaction_is_rolled_back_by_another_process(world: Path, home: Path) -> None:
    assert run_agent(world, "kill-after-two") == -9
    tools()
    with AgentKit(home=home) as kit:
        report = kit.recover()
        assert [s.status for s in report.recovered] == [SagaStatus.ROLLED_BACK]
        assert [s.action for s in report.recovered[0].steps] == ["compensated", "compensated"]
        assert actions(world) == ["reserve", "charge", "refund", "cancel"]
        end = list(kit.store.records())[-1]
        assert end.kind == Kind.SAGA_END
        assert end.data["recovered"] is True
        # A second run finds nothing to do, and nothing is compensated twice.
        again = kit.recover()
        assert again.recovered == ()
        assert count(world, "refund") == 1
        assert kit.verify().ok


def test_crash_between_effect_and_done_record_is_probed(world: Path, home: Path) -> None:
    assert run_agent(world, "probed", crash_at="after-charge-effect") == -9
    tools()
    with AgentKit(home=home) as kit:
        report = kit.recover()
    (saga,) = report.recovered
    assert saga.status is SagaStatus.ROLLED_BACK
    assert [(s.tool, s.action) for s in saga.steps] == [
        ("rt.charge", "compensated"),
        ("rt.reserve", "compensated"),
    ]
    assert (count(world, "charge"), count(world, "refund")) == (1, 1)


def test_unknown_outcome_without_probe_is_escalated_never_assumed(world: Path, home: Path) -> None:
    assert run_agent(world, "unprobed", crash_at="after-charge-effect") == -9
    tools()
    with AgentKit(home=home) as kit:
        report = kit.recover()
        (saga,) = report.recovered
        assert saga.status is SagaStatus.NEEDS_HUMAN
        assert not report.settled
        escalated = [s for s in saga.steps if s.action == "escalated"]
        assert escalated[0].tool == "rt.charge_unprobed"
        assert "no probe" in escalated[0].detail
        assert count(world, "refund") == 0  # not assumed either way
        assert count(world, "cancel") == 1  # the step that did commit is still undone
        kinds = [r.kind for r in kit.store.records()]
        assert Kind.RECOVERY_ESCALATED in kinds


def test_crash_during_compensation_is_finished_with_the_same_key(world: Path, home: Path) -> None:
    assert run_agent(world, "probed", crash_at="after-refund") == -9
    assert count(world, "refund") == 1
    tools()
    with AgentKit(home=home) as kit:
        report = kit.recover()
    assert report.recovered[0].status is SagaStatus.ROLLED_BACK
    refunds = [p.name for p in world.iterdir() if p.name.startswith("refund@")]
    assert len(refunds) == 1  # the re-run used the same idempotency key
    assert count(world, "cancel") == 1


def test_missing_compensators_mean_needs_human_with_the_name(world: Path, home: Path) -> None:
    assert run_agent(world, "kill-after-two") == -9
    with AgentKit(home=home, registry=__import__("agent_saga").CompensatorRegistry()) as kit:
        report = kit.recover()
    (saga,) = report.recovered
    assert saga.status is SagaStatus.NEEDS_HUMAN
    assert any("rt.refund" in s.detail and "import" in s.detail for s in saga.steps)
    assert count(world, "refund") == 0


def test_live_owner_is_left_alone(world: Path, home: Path) -> None:
    mod = tools()
    with AgentKit(home=home, ids=SequentialIds("live")) as agent, AgentKit(home=home) as other:
        with agent.transaction("long"):
            mod.reserve("LH1")
            report = other.recover()
            assert report.live == ("live-0001",)
            assert report.recovered == ()
        assert count(world, "cancel") == 0


def test_two_recovery_workers_claim_a_saga_once(world: Path, home: Path) -> None:
    assert run_agent(world, "kill-after-two") == -9
    tools()
    with AgentKit(home=home) as first, AgentKit(home=home) as second:
        held = first.store.lease(f"recover-{_only_saga(first)}", ttl=60)
        assert held is not None
        assert second.recover().claimed_elsewhere == (_only_saga(first),)
        held.release()
        assert len(second.recover().recovered) == 1
        assert first.recover().recovered == ()
    assert count(world, "refund") == 1


def _only_saga(kit: AgentKit) -> str:
    (saga,) = {r.saga for r in kit.store.records() if r.saga}
    return saga


def cli(home: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).parent / "agent-saga"
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    return subprocess.run(
        [str(script), "--home", str(home), "--no-color", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        check=False,
    )


def test_cli_recover_imports_the_users_compensators(world: Path, home: Path) -> None:
    assert run_agent(world, "kill-after-two") == -9
    code_dir = world.parent / "code"
    first = cli(home, "recover", "--import", "rt_tools", cwd=code_dir)
    assert first.returncode == 0, first.stderr
    assert "rolled_back" in first.stdout
    assert "#2 rt.charge  compensated" in first.stdout
    again = cli(home, "recover", "--import", "rt_tools", cwd=code_dir)
    assert again.returncode == 0
    assert again.stdout.strip() == "nothing to recover"
    assert count(world, "refund") == 1


def test_cli_recover_without_compensators_exits_3_and_names_them(world: Path, home: Path) -> None:
    assert run_agent(world, "kill-after-two") == -9
    result = cli(home, "recover", cwd=world.parent)
    assert result.returncode == 3
    assert "needs_human" in result.stdout
    assert "rt.refund" in result.stdout
    assert "needs a human" in result.stderr
    assert count(world, "refund") == 0


def test_cli_recover_reads_imports_from_configuration(world: Path, home: Path) -> None:
    assert run_agent(world, "kill-after-two") == -9
    code_dir = world.parent / "code"
    (code_dir / "agent-saga.toml").write_text('imports = ["rt_tools"]\n')
    result = cli(home, "recover", "--json", cwd=code_dir)
    assert result.returncode == 0, result.stderr
    assert '"status": "rolled_back"' in result.stdout


def test_cli_recover_unimportable_module_is_a_one_line_error(home: Path, world: Path) -> None:
    assert run_agent(world, "kill-after-two") == -9
    result = cli(home, "recover", "--import", "no_such_module_here")
    assert result.returncode == 1
    assert result.stderr.startswith("Error: cannot import 'no_such_module_here'")
    assert "Traceback" not in result.stderr


def test_cli_recover_watch_recovers_as_crashes_happen(world: Path, home: Path) -> None:
    assert run_agent(world, "kill-after-two") == -9  # creates the home and log
    code_dir = world.parent / "code"
    script = Path(sys.executable).parent / "agent-saga"
    watcher = subprocess.Popen(
        [str(script), "--home", str(home), "recover", "--watch", "--interval", "0.2",
         "--import", "rt_tools"],
        cwd=code_dir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert run_agent(world, "kill-after-two") == -9
        deadline = time.monotonic() + 20
        while count(world, "refund") < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert count(world, "refund") == 2
    finally:
        watcher.terminate()
        watcher.wait(timeout=10)
