"""End to end: the installed ``agent-saga`` script runs the demo, and the log it leaves verifies
until one byte of it changes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(sys.executable).parent / "agent-saga"


def agent_saga(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("AGENT_SAGA_HOME", "FORCE_COLOR")}
    return subprocess.run(
        [str(SCRIPT), *args],
        cwd=cwd,
        env={**env, "NO_COLOR": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_demo_then_inspect_then_tamper(tmp_path: Path) -> None:
    demo = agent_saga("demo", cwd=tmp_path)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert demo.stderr == ""
    assert "charged 1, refunded 1" in demo.stdout
    log = tmp_path / ".agent-saga" / "log.jsonl"  # the default home, under the working directory
    assert log.is_file()
    match = re.search(r"agent-saga replay (\S+)", demo.stdout)
    assert match is not None, demo.stdout
    saga_id = match.group(1)
    assert "agent-saga sagas" in demo.stdout
    assert "agent-saga verify" in demo.stdout

    verified = agent_saga("verify", cwd=tmp_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    records = int(re.search(r"(\d+) records", verified.stdout).group(1))  # type: ignore[union-attr]
    assert records == len(log.read_bytes().splitlines())

    listing = agent_saga("sagas", cwd=tmp_path)
    assert re.search(rf"^{re.escape(saga_id)}\s+rolled_back\b", listing.stdout, flags=re.M)

    replay = agent_saga("replay", saga_id, cwd=tmp_path)
    assert replay.returncode == 0, replay.stderr
    assert "refused by max_value" in replay.stdout
    assert "demo.payments.refund (by name) -> compensated" in replay.stdout
    assert "final status  rolled_back" in replay.stdout

    again = agent_saga("demo", cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert agent_saga("verify", cwd=tmp_path).returncode == 0

    data = bytearray(log.read_bytes())
    middle = len(data) // 2
    data[middle] = ord("Z") if data[middle] != ord("Z") else ord("Y")
    log.write_bytes(bytes(data))
    broken = agent_saga("verify", cwd=tmp_path)
    assert broken.returncode == 1
    found = re.search(r"byte offset (\d+) \(seq (\d+)\)", broken.stdout)
    assert found is not None, broken.stdout
    offset = int(found.group(1))
    assert offset <= middle < offset + len(data[offset:].split(b"\n", 1)[0]) + 1
    assert data[offset - 1 : offset] == b"\n" or offset == 0  # a record boundary
    assert "Traceback" not in broken.stdout + broken.stderr
