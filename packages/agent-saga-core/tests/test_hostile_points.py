"""Hostile or unlucky homes: garbled resume points and frontiers, an idle solo writer.

``checkpoints/verified/*.json`` (where ``verify --since`` resumes) and
``checkpoints/frontier.json`` (where a kit's checkpointer resumes) are plain files in the home:
an unlucky disk or a hostile user can leave anything there. Each file below is one such: JSON
nested past the parser's recursion, a size or an offset of ``1e400`` (infinity once read). The
command and the kit must ignore it (a full read instead) and still check the whole log.

A solo writer keeps ``log.lock`` while it is idle, and lets go only of a waiter it can see:
every other store must wait where it sees them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from agent_saga import REVERSIBLE, AgentKit, Entry, FileLogStore, verify_file
from agent_saga.cli import main
from click.testing import CliRunner, Result

RECORDS = 30


def cli(home: Path, *args: str) -> Result:
    return CliRunner().invoke(main, ["--home", str(home), *args])


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A log of 30 records, a checkpoint of it, verified once (so a resume point exists)."""
    home = tmp_path / "home"
    with FileLogStore(home) as store:
        for n in range(RECORDS):
            store.append([Entry("t", None, {"n": n}, n)], sync=True)
    assert cli(home, "checkpoint").exit_code == 0
    assert cli(home, "verify").exit_code == 0
    return home


def _garbled(point: Path, how: str) -> bytes:
    if how == "nested":
        return b"[" * 60_000
    stored = json.loads(point.read_text())
    stored[how] = "INF"
    return json.dumps(stored).replace('"INF"', "1e400").encode()


GARBLES = ["nested", "size", "offset"]


@pytest.mark.parametrize("how", GARBLES)
def test_verify_since_ignores_a_garbled_resume_point(home: Path, how: str) -> None:
    [point] = (home / "checkpoints" / "verified").glob("*.json")
    point.write_bytes(_garbled(point, how))
    result = cli(home, "verify", "--since", "latest")
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 0, result.output
    assert f"resume point {point.name} not used" in result.output
    assert f"log intact: {RECORDS} records" in result.output


@pytest.mark.parametrize("how", GARBLES)
def test_a_kit_ignores_a_garbled_frontier_file(home: Path, how: str) -> None:
    [point] = (home / "checkpoints" / "verified").glob("*.json")
    (home / "checkpoints" / "frontier.json").write_bytes(_garbled(point, how))
    point.unlink()
    with AgentKit(home=home, checkpoint_every=1, checkpoint_interval=3600) as kit:

        @kit.tool(name="t.add", semantics=REVERSIBLE)
        def add(x: int) -> int:
            return x + 1

        with kit.transaction("one"):
            add(1)
        published = kit.checkpoint()
        assert kit.checkpointer is not None
        assert kit.checkpointer._resumed_at == 0  # read from record 1
    assert published.size > RECORDS
    result = cli(home, "verify")
    assert result.exit_code == 0, result.output
    assert f"consistent with the latest checkpoint ({published.size} records)" in result.output


_IDLE_SOLO_HOLDER = """
import sys, time
from pathlib import Path
from agent_saga import Entry, FileLogStore
store = FileLogStore(Path(sys.argv[1]), solo=True)
store.append([Entry("test", None, {"p": "solo"}, 0)], sync=True)
print("solo" if store.solo_active else "shared", flush=True)
time.sleep(120)  # an agent waiting for its user: it writes nothing
"""


def test_a_store_without_solo_mode_gets_the_home_from_an_idle_solo_holder(tmp_path: Path) -> None:
    """solo=False (the default, and every command's kit) must not wait forever behind an
    idle solo writer: it asks for the lock the way a solo store does."""
    home = tmp_path / "home"
    FileLogStore(home).close()
    holder = subprocess.Popen(
        [sys.executable, "-c", _IDLE_SOLO_HOLDER, str(home)], stdout=subprocess.PIPE, text=True
    )
    outcome: list[object] = []

    def write_beside_it() -> None:
        try:
            with FileLogStore(home, solo=False) as store:
                store.append([Entry("test", None, {"p": "shared"}, 1)], sync=True)
            outcome.append("written")
        except BaseException as exc:  # reported by the assertion below
            outcome.append(exc)

    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "solo"
        writer = threading.Thread(target=write_beside_it, daemon=True)
        writer.start()
        writer.join(timeout=10)
        written_in_time = list(outcome)
    finally:
        holder.kill()  # lets a writer that was stuck behind it go on
        holder.wait(timeout=30)
        if holder.stdout is not None:
            holder.stdout.close()
    writer.join(timeout=30)
    assert written_in_time == ["written"]
    assert verify_file(home / "log.jsonl").ok
