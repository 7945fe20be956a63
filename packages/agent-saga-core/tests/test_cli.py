"""The ``agent-saga`` command line, driven in-process with click's runner and as a real script."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from agent_saga import (
    AgentKit,
    CorruptLogError,
    Entry,
    FileLogStore,
    HaltedError,
    SagaRolledBack,
    compensator,
    tool,
)
from agent_saga._log.codec import JSONValue
from agent_saga.cli import main
from click.testing import CliRunner, Result

SCRIPT = Path(sys.executable).parent / "agent-saga"
COUNTS: dict[str, int] = {"book": 0, "unbook": 0, "bill": 0, "unbill": 0}


@compensator("test_cli.unbook")
def _unbook(result: str, idempotency_key: str) -> None:
    COUNTS["unbook"] += 1


@compensator("test_cli.unbill")
def _unbill(result: int) -> None:
    COUNTS["unbill"] += 1
    raise ConnectionError("billing API down")


@tool(name="test_cli.book", semantics="compensable", compensate="test_cli.unbook")
def book(room: str, nights: int) -> str:
    COUNTS["book"] += 1
    return f"booking-{room}"


@tool(name="test_cli.bill", semantics="compensable", compensate="test_cli.unbill")
def bill(cents: int) -> int:
    COUNTS["bill"] += 1
    return cents


@tool(name="test_cli.fail", semantics="reversible")
def fail(message: str) -> None:
    raise RuntimeError(message)


# What a test that looks at styling sets itself (``None`` unsets): the runner's output is not a
# terminal, so without FORCE_COLOR (or TTY_COMPATIBLE) nothing is styled; with it, colour is on
# unless NO_COLOR is set or TERM names a dumb terminal.
NOT_A_TERMINAL: dict[str, str | None] = {"FORCE_COLOR": None, "TTY_COMPATIBLE": None}
COLOUR_FORCED: dict[str, str | None] = {
    "FORCE_COLOR": "1",
    "NO_COLOR": None,
    "TERM": "xterm-256color",
    "TTY_COMPATIBLE": None,
}
STYLE = re.compile(r"\x1b\[[0-9;]*m")
"""An SGR sequence: how rich styles text (colour, bold)."""


def run(home: Path, *args: str, env: Mapping[str, str | None] | None = None) -> Result:
    return CliRunner().invoke(main, ["--home", str(home), *args], env=env)


def script(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
        check=False,
    )


def assert_one_line_error(result: Result, code: int) -> str:
    assert result.exit_code == code, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ")
    assert "Traceback" not in result.output
    return lines[0]


def saga_ids(home: Path) -> list[str]:
    listing = run(home, "sagas")
    assert listing.exit_code == 0, listing.output
    return re.findall(r"^(\S+-\S+)\s", listing.stdout, flags=re.M)


def make_three_sagas(home: Path) -> list[str]:
    """A committed, a rolled-back and a needs-human saga in ``home``'s file log."""
    ids: list[str] = []
    with AgentKit(home=home) as kit:
        with kit.transaction("stay") as saga:
            book("101", 2)
        ids.append(saga.id)
        with pytest.raises(SagaRolledBack) as rolled, kit.transaction("stay-then-fail"):
            book("102", nights=3)
            fail("payment form crashed")
        ids.append(rolled.value.saga_id)
        with pytest.raises(SagaRolledBack) as stuck, kit.transaction("bill-then-fail"):
            bill(1999)
            fail("late failure")
        ids.append(stuck.value.saga_id)
    return ids


def flip_middle_byte(path: Path) -> int:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle] = ord("Z") if data[middle] != ord("Z") else ord("Y")
    path.write_bytes(bytes(data))
    return middle


# -- demo, verify ---------------------------------------------------------------------------------


def test_demo_tells_the_story_and_leaves_a_verifying_log(tmp_path: Path) -> None:
    home = tmp_path / "home"
    result = run(home, "demo")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "refused by max_value" in out
    assert "charged 1, refunded 1" in out
    assert "seats held 1, released 1" in out
    assert out.index("refunded 319.00") < out.index("released (PNR-001)")  # reverse order
    (saga_id,) = saga_ids(home)
    assert f"agent-saga --home {home} replay {saga_id}" in out
    assert f"agent-saga --home {home} verify" in out
    assert len(out.splitlines()) <= 40
    verified = run(home, "verify")
    assert verified.exit_code == 0, verified.output
    assert "log intact" in verified.stdout


def test_demo_twice_in_one_home_grows_the_log(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert run(home, "demo").exit_code == 0
    first = (home / "log.jsonl").stat().st_size
    assert run(home, "demo").exit_code == 0
    assert (home / "log.jsonl").stat().st_size > first
    assert len(saga_ids(home)) == 2
    assert run(home, "verify").exit_code == 0


def test_verify_names_the_offset_of_a_flipped_byte(tmp_path: Path) -> None:
    home = tmp_path / "home"
    make_three_sagas(home)
    intact = run(home, "verify")
    records = int(re.search(r"(\d+) records", intact.stdout).group(1))  # type: ignore[union-attr]
    middle = flip_middle_byte(home / "log.jsonl")
    result = run(home, "verify")
    assert result.exit_code == 1
    match = re.search(r"byte offset (\d+) \(seq (\d+)\)", result.stdout)
    assert match is not None, result.stdout
    offset, seq = int(match.group(1)), int(match.group(2))
    lines = (home / "log.jsonl").read_bytes().splitlines(keepends=True)
    starts = [sum(len(line) for line in lines[:i]) for i in range(len(lines))]
    assert offset == max(s for s in starts if s <= middle)  # the record holding the flip
    assert seq == starts.index(offset) + 1
    assert 1 <= seq <= records
    listing = run(home, "sagas")
    assert f"offset {offset}" in assert_one_line_error(listing, 1)


# -- sagas, replay ----------------------------------------------------------------------------


def test_sagas_lists_statuses_newest_last_and_filters(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ids = make_three_sagas(home)
    result = run(home, "sagas")
    assert result.exit_code == 0, result.output
    rows = [line for line in result.stdout.splitlines() if line.split()[:1] in ([i] for i in ids)]
    assert [row.split()[0] for row in rows] == ids
    assert [row.split()[1] for row in rows] == ["committed", "rolled_back", "needs_human"]
    only = run(home, "sagas", "--status", "needs_human")
    assert ids[2] in only.stdout
    assert ids[0] not in only.stdout
    bad = run(home, "sagas", "--status", "exploded")
    assert_one_line_error(bad, 2)


def test_replay_shows_everything_and_runs_no_compensator(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ids = make_three_sagas(home)
    before = dict(COUNTS)
    rolled = run(home, "replay", ids[1])
    stuck = run(home, "replay", ids[2][:-3])  # a unique prefix is enough
    assert before == COUNTS  # nothing was booked, billed or compensated again
    assert rolled.exit_code == 0, rolled.output
    out = rolled.stdout
    assert '{"nights": 3, "room": "102"}' in out
    assert 'done -> "booking-102"' in out
    assert "test_cli.unbook (by name) -> compensated" in out
    assert "failed: RuntimeError: payment form crashed" in out
    assert "cause         RuntimeError: payment form crashed" in out
    assert "compensated   #1" in out
    assert "final status  rolled_back" in out
    assert stuck.exit_code == 0, stuck.output
    assert "FAILED: ConnectionError: billing API down" in stuck.stdout
    assert "final status  needs_human" in stuck.stdout


def test_replay_shows_a_refusal_with_rule_and_reason(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert run(home, "demo").exit_code == 0
    (saga_id,) = saga_ids(home)
    result = run(home, "replay", saga_id)
    assert "refused by max_value: amount=31900 exceeds the cap of 500.0" in result.stdout
    assert "demo.payments.refund (by name) -> compensated" in result.stdout


def test_unknown_and_ambiguous_ids_are_one_line_usage_errors(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ids = make_three_sagas(home)
    unknown = assert_one_line_error(run(home, "replay", "no-such-saga"), 2)
    assert "no saga matches 'no-such-saga'" in unknown
    common = ids[0][:4]  # UUIDv7 ids start with the time they were made (here: ~49 days)
    assert all(saga_id.startswith(common) for saga_id in ids)
    ambiguous = assert_one_line_error(run(home, "replay", common), 2)
    assert "ambiguous" in ambiguous
    assert all(saga_id in ambiguous for saga_id in ids)


class OldFormatIds:
    """Saga ids as versions before UUIDs made them: a UTC second, then 64 random bits."""

    def __init__(self) -> None:
        self.count = 0

    def new_id(self) -> str:
        self.count += 1
        return f"20261201T12140{self.count}-{self.count:016x}"


def test_old_and_uuid_ids_in_one_log_verify_replay_and_prove_by_prefix(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with AgentKit(home=home, ids=OldFormatIds()) as kit:
        for room in ("201", "202"):
            with kit.transaction("stay-old"):
                book(room, 1)
    with AgentKit(home=home) as kit, kit.transaction("stay-new") as saga:
        book("203", 1)
    old_ids = ["20261201T121401-0000000000000001", "20261201T121402-0000000000000002"]
    assert saga_ids(home) == [*old_ids, saga.id]
    assert run(home, "verify").exit_code == 0
    # Old ids by prefix, as before.
    assert "booking-202" in run(home, "replay", "20261201T121402").stdout
    # A UUID by a prefix typed with or without dashes, in either case.
    dashless = saga.id.replace("-", "")
    for prefix in (saga.id[:13], dashless[:12], dashless[:12].upper(), saga.id):
        replayed = run(home, "replay", prefix)
        assert replayed.exit_code == 0, (prefix, replayed.output)
        assert "booking-203" in replayed.stdout
    for wanted, prefix in ((old_ids[0], "20261201T121401"), (saga.id, dashless[:16])):
        bundle = tmp_path / f"{wanted}.json"
        proved = run(home, "prove", prefix, "-o", str(bundle))
        assert proved.exit_code == 0, proved.output
        assert f"saga {wanted}," in proved.stdout
        assert json.loads(bundle.read_text())["saga"] == wanted
    ambiguous = assert_one_line_error(run(home, "prove", "2026", "-o", str(tmp_path / "x")), 2)
    assert all(saga_id in ambiguous for saga_id in old_ids)


def test_log_content_cannot_inject_terminal_sequences(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with (
        AgentKit(home=home) as kit,
        pytest.raises(SagaRolledBack),
        kit.transaction("\x1b[2Jevil [bold]name"),
    ):
        fail("\x1b[31mred\nsecond line")
    (saga_id,) = saga_ids(home)
    escaped = "\\x1b[31mred\\x0asecond line"
    plain = run(home, "replay", saga_id, env=NOT_A_TERMINAL).stdout
    assert "\x1b" not in plain
    assert escaped in plain
    assert "[bold]name" in plain
    # With colour on, rich's own styling is there, and only that: no sequence from the log.
    coloured = run(home, "replay", saga_id, env=COLOUR_FORCED).stdout
    assert STYLE.search(coloured)
    assert "\x1b" not in STYLE.sub("", coloured)
    assert "\x1b[31mred" not in coloured
    assert escaped in STYLE.sub("", coloured)
    assert "[bold]name" in STYLE.sub("", coloured)


# -- halt, resume, status ------------------------------------------------------------------------


def test_halt_stops_a_running_agent_and_resume_releases_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with AgentKit(home=home) as kit:
        with pytest.raises(SagaRolledBack) as info, kit.transaction("long job"):
            book("201", 1)
            halted = script("--home", str(home), "halt", "--reason", "runaway agent")
            assert halted.returncode == 0, halted.stderr
            book("202", 1)  # the kill switch is read before every effect
        assert isinstance(info.value.cause, HaltedError)
        assert "runaway agent" in info.value.cause.reason
        assert COUNTS["unbook"] >= 1
    status = run(home, "status")
    assert status.exit_code == 1
    assert "halted: runaway agent" in status.stdout
    resumed = run(home, "resume")
    assert resumed.exit_code == 0, resumed.output
    assert not (home / "HALT").exists()
    assert run(home, "status").exit_code == 0
    listing = run(home, "sagas")
    assert "1 control.halt" in listing.stdout
    assert "1 control.resume" in listing.stdout


def test_halt_works_on_a_corrupt_log_and_resume_refuses(tmp_path: Path) -> None:
    home = tmp_path / "home"
    make_three_sagas(home)
    flip_middle_byte(home / "log.jsonl")
    halted = run(home, "halt", "--reason", "log looks tampered")
    assert halted.exit_code == 0
    assert json.loads((home / "HALT").read_text())["reason"] == "log looks tampered"
    assert "control.halt record could not be written" in halted.stderr
    with pytest.raises(CorruptLogError, match="log corrupt"):
        AgentKit(home=home)
    refused = run(home, "resume")
    assert "kill switch stays engaged" in assert_one_line_error(refused, 1)
    assert (home / "HALT").exists()
    status = run(home, "status")
    assert status.exit_code == 1
    assert "NOT READY" in status.stdout


def test_halt_needs_a_reason_in_one_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    missing = assert_one_line_error(run(home, "halt"), 2)
    assert "--reason" in missing
    assert_one_line_error(run(home, "halt", "--reason", "   "), 2)
    assert not (home / "HALT").exists()


# -- guarantees, reading on a missing home, colours, imports ---------------------------------------


def test_guarantees_prints_the_manifest_as_json(tmp_path: Path) -> None:
    home = tmp_path / "home"
    make_three_sagas(home)
    raw = run(home, "guarantees", "--json")
    assert raw.exit_code == 0, raw.output
    manifest: dict[str, Any] = json.loads(raw.stdout)
    assert manifest["manifest_version"] == 1
    assert manifest["store"]["path"] == str(home / "log.jsonl")
    assert len(raw.stdout.strip().splitlines()) == 1
    pretty = run(home, "--no-color", "guarantees")
    assert json.loads(pretty.stdout) == manifest


@pytest.mark.parametrize(
    "args",
    [
        ["sagas"],
        ["replay", "abc"],
        ["verify"],
        ["status"],
        ["guarantees"],
        ["halt", "--reason", "x"],
        ["resume"],
    ],
)
def test_commands_on_a_missing_home_create_nothing(tmp_path: Path, args: list[str]) -> None:
    home = tmp_path / "absent"
    message = assert_one_line_error(run(home, *args), 2)
    assert str(home) in message
    assert not home.exists()


def test_home_comes_from_the_environment(tmp_path: Path) -> None:
    home = tmp_path / "from-env"
    make_three_sagas(home)
    result = CliRunner().invoke(main, ["verify"], env={"AGENT_SAGA_HOME": str(home)})
    assert result.exit_code == 0, result.output
    assert str(home / "log.jsonl") in result.stdout


def test_no_color_and_NO_COLOR_give_plain_text(tmp_path: Path) -> None:
    home = tmp_path / "home"
    make_three_sagas(home)
    forced = COLOUR_FORCED
    assert "\x1b[" in run(home, "sagas", env=forced).stdout  # colour is on when forced
    assert "\x1b[" not in run(home, "--no-color", "sagas", env=forced).stdout
    assert "\x1b[" not in run(home, "sagas", env={**forced, "NO_COLOR": "1"}).stdout


def test_import_agent_saga_loads_no_cli_dependency() -> None:
    code = (
        "import sys, agent_saga, agent_saga._history.build; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('click', 'rich')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_help_documents_exit_codes() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    assert "Exit codes:" in result.stdout
    for code in ("0  success", "1  the answer is no", "2  bad input"):
        assert code in result.stdout


def test_certify_shows_hostile_saga_ids_and_tools_escaped(tmp_path: Path) -> None:
    """A record anyone who can write the log appends, whose saga id (or tool) holds terminal
    sequences: certify's findings show them escaped, as replay and sagas do."""
    home = tmp_path / "home"
    with AgentKit(home=home) as kit, kit.transaction("ok"):
        pass
    hostile = "\x1b[2J\x1b[1;1HCERTIFIED: all good\x1b[8m"
    with FileLogStore(home) as store:
        begin: dict[str, JSONValue] = {"name": "n", "owner": "gone-1"}
        store.append([Entry("saga.begin", hostile, begin, 0)], sync=True)
        intent: dict[str, JSONValue] = {
            "ordinal": 1, "tool": "\x1b[8mt", "semantics": "irreversible", "args": {}
        }  # fmt: skip
        store.append([Entry("step.intent", hostile, intent, 0)], sync=True)
    result = run(home, "certify", env=NOT_A_TERMINAL)
    assert result.exit_code == 1
    assert "\x1b" not in result.stdout
    assert "saga \\x1b[2J\\x1b[1;1HCERTIFIED: all good\\x1b[8m" in result.stdout
    assert "(\\x1b[8mt)" in result.stdout


def test_recover_shows_hostile_saga_ids_names_and_tools_escaped(tmp_path: Path) -> None:
    """An unfinished saga whose id, name and tool hold terminal sequences, its owner gone:
    recover's account (stdout) and its needs-a-human line (stderr) show them escaped."""
    home = tmp_path / "home"
    with AgentKit(home=home) as kit, kit.transaction("ok"):
        pass
    hostile = "\x1b[2Jid"
    with FileLogStore(home) as store:
        begin: dict[str, JSONValue] = {"name": "\x1b[8mname", "owner": "gone-1"}
        store.append([Entry("saga.begin", hostile, begin, 0)], sync=True)
        intent: dict[str, JSONValue] = {
            "ordinal": 1,
            "tool": "\x1b[8mt",
            "semantics": "compensable",
            "args": {},
            "compensation": {"name": "missing.undo"},
        }
        store.append([Entry("step.intent", hostile, intent, 0)], sync=True)
        store.append([Entry("step.done", hostile, {"ordinal": 1, "result": 1}, 0)], sync=True)
    result = run(home, "recover", env=NOT_A_TERMINAL)
    assert "\\x1b[2Jid" in result.stdout
    assert "\x1b" not in result.stdout
    assert "\x1b" not in result.stderr
