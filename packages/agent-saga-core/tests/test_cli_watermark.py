"""verify, certify and the other reading commands check the synced watermark as opening does.

The attack: a committed saga written after the latest checkpoint is cut from the end of the
file log, at a record boundary, while ``log.synced`` (the synced length) stays intact. The chain
still verifies and the checkpoint still matches the records that remain; only the watermark
shows that synced bytes went missing. Opening the store refuses such a log, and so must every
command that reads it.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from agent_saga import AgentKit, compensator, tool
from agent_saga.cli import main
from click.testing import CliRunner, Result

CALLS: list[str] = []


@compensator("watermark.unbook")
def _unbook(result: str) -> None:
    CALLS.append(f"unbook {result}")


@tool(name="watermark.book", semantics="compensable", compensate="watermark.unbook")
def book(room: str) -> str:
    return f"booking-{room}"


def run(home: Path, *args: str) -> Result:
    return CliRunner().invoke(main, ["--home", str(home), *args])


def cut_home(home: Path) -> tuple[int, int]:
    """Saga A under a checkpoint, then saga B after it; returns (size with A, size with B)."""
    with AgentKit(home=home) as kit, kit.transaction("covered"):
        book("101")
    covered = (home / "log.jsonl").stat().st_size
    with AgentKit(home=home, checkpoints=False) as kit, kit.transaction("after-checkpoint"):
        book("102")
    full = (home / "log.jsonl").stat().st_size
    assert full > covered
    return covered, full


def cut_saga_b(home: Path, covered: int) -> None:
    with (home / "log.jsonl").open("r+b") as log:
        log.truncate(covered)


def test_verify_catches_a_committed_saga_cut_after_the_latest_checkpoint(home: Path) -> None:
    covered, full = cut_home(home)
    cut_saga_b(home, covered)
    result = run(home, "verify")
    assert result.exit_code == 1, result.output
    assert f"{full} bytes were synced" in result.output
    assert "records were removed" in result.output


def test_certify_catches_the_cut_and_publishes_no_checkpoint_over_it(home: Path) -> None:
    covered, _ = cut_home(home)
    latest = (home / "checkpoints" / "latest.note").read_text()
    cut_saga_b(home, covered)
    result = run(home, "certify")
    assert result.exit_code == 1, result.output
    assert "NOT CERTIFIED" in result.output
    assert "records were removed" in result.output
    # a checkpoint signed now would vouch for the shortened log
    assert (home / "checkpoints" / "latest.note").read_text() == latest


@pytest.mark.parametrize("command", [["sagas"], ["checkpoint"]])
def test_other_reading_commands_refuse_the_cut_log(home: Path, command: list[str]) -> None:
    covered, _ = cut_home(home)
    cut_saga_b(home, covered)
    result = run(home, *command)
    assert result.exit_code == 1, result.output
    assert "records were removed" in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_opening_the_store_agrees(home: Path) -> None:
    covered, _ = cut_home(home)
    cut_saga_b(home, covered)
    result = run(home, "status")
    assert result.exit_code == 1
    assert "records were removed" in result.output


def test_a_log_being_written_never_reads_as_cut(home: Path) -> None:
    """The watermark is read before the log's end: a writer racing the reader is no removal."""
    stop = threading.Event()

    def writer() -> None:
        with AgentKit(home=home, checkpoints=False) as kit:
            while not stop.is_set():
                with kit.transaction("busy"):
                    book("200")

    with AgentKit(home=home, checkpoints=False) as kit, kit.transaction("first"):
        book("100")
    thread = threading.Thread(target=writer)
    thread.start()
    try:
        results = [run(home, "verify") for _ in range(15)]
    finally:
        stop.set()
        thread.join()
    assert [r.exit_code for r in results] == [0] * 15, [r.output for r in results]
    assert all("log intact" in r.output for r in results)
