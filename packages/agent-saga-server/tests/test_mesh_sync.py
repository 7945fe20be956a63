"""Devices that act offline sync through a real control plane's ingest (``agent-saga sync
--server``): in any order, repeated or partial, the server ends holding each device's log as
the device signed it, the same records a merge of their homes through files keeps, and
certify holds there; a fleet halt on the server halts the device that syncs."""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

import pytest
from agent_saga import REVERSIBLE, AgentKit, HaltedError, merge_logs, merged_view, read_log
from agent_saga.cli import main
from click.testing import CliRunner, Result
from plane_testkit import RunningServer, free_port


class Device:
    """A device's home, its server origin and agent token (in a private file)."""

    def __init__(self, server: RunningServer, root: Path, name: str) -> None:
        self.home = root / name
        self.origin = f"{name}-{uuid.uuid4().hex[:8]}"  # the server outlives this test
        self.token_file = root / f"{name}.token"
        fd = os.open(self.token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(server.token("agent", self.origin) + "\n")

    def act(self, steps: int) -> None:
        """Run one transaction of REVERSIBLE steps offline (the kit checkpoints on close)."""
        with AgentKit(home=self.home) as kit:

            @kit.tool(name="dock.scan", semantics=REVERSIBLE)
            def scan(bay: int) -> str:
                return f"bay {bay} clear"

            with kit.transaction("patrol"):
                for bay in range(steps):
                    scan(bay)

    def sync(self, server: RunningServer, *extra: str) -> Result:
        args = ["--home", str(self.home), "sync", "--server", server.url]
        return CliRunner().invoke(main, [*args, "--token-file", str(self.token_file), *extra])

    def tail(self) -> tuple[int, str]:
        records = list(read_log(self.home))
        return records[-1].seq, records[-1].hash


def _server_copy(server: RunningServer, origin: str) -> tuple[int, str, int]:
    with server.client(server.admin) as client:
        state = client.get(f"/v1/origins/{origin}").json()
    return int(state["last_seq"]), str(state["last_hash"]), int(state["checkpoint_size"])


def test_syncs_in_any_order_converge_on_the_server_and_agree_with_a_file_merge(
    server: RunningServer, tmp_path: Path
) -> None:
    a, b, c = (Device(server, tmp_path, name) for name in ("robot-a", "robot-b", "laptop-c"))
    for device, steps in ((a, 3), (b, 5), (c, 2)):
        device.act(steps)
    # B first, then A; A acts again offline and syncs again; B syncs again (nothing new); C last.
    for device in (b, a):
        synced = device.sync(server)
        assert synced.exit_code == 0, synced.output
        assert f"as origin {device.origin}" in synced.output
    a.act(4)
    for device in (a, b, c):
        synced = device.sync(server)
        assert synced.exit_code == 0, synced.output
    for device in (a, b, c):
        seq, digest = device.tail()
        assert f"the server holds {seq} of {seq} records, checkpoint of {seq}" in (
            device.sync(server).output  # a repeated sync sends nothing new and still holds
        )
        assert _server_copy(server, device.origin) == (seq, digest, seq)
        with server.client(server.admin) as client:
            certified = client.get(f"/v1/audit/certify/{device.origin}").json()
        assert certified["ok"] is True, certified
        assert certified["records"] == seq
    # The same homes merged through files, in another order: the same tips, origin by origin.
    mesh = tmp_path / "fleet"
    report = merge_logs(mesh, [c.home, a.home, b.home])
    assert report.rejected == ()
    view = merged_view(mesh)
    by_name = {name: origin_id for origin_id, name in view.origins.items()}
    for device in (a, b, c):
        key_name = (device.home / "keys" / "checkpoint.pub").read_text().split("+")[0]
        tip = view.tips()[by_name[key_name]]
        seq, digest, _ = _server_copy(server, device.origin)
        assert tip == (seq, digest)


def test_a_fleet_halt_on_the_server_halts_the_device_that_syncs(
    server: RunningServer, tmp_path: Path
) -> None:
    device = Device(server, tmp_path, "robot-h")
    device.act(2)
    with server.client(server.admin) as client:
        client.post("/v1/killswitch/halt", json={"reason": "storm over the yard"})
    try:
        synced = device.sync(server)
    finally:
        with server.client(server.admin) as client:
            client.post("/v1/killswitch/resume", json={"reason": "storm passed"})
    assert synced.exit_code == 0, synced.output
    assert "fleet halted: storm over the yard; this device is halted" in synced.output
    seq, digest = device.tail()
    assert _server_copy(server, device.origin) == (seq, digest, seq)  # it shipped all the same
    with pytest.raises(HaltedError):
        device.act(1)


def test_a_refused_token_or_a_missing_target_is_one_line(
    server: RunningServer, tmp_path: Path
) -> None:
    device = Device(server, tmp_path, "robot-x")
    device.act(1)
    runner = CliRunner()
    home = ["--home", str(device.home)]
    refused = runner.invoke(main, [*home, "sync", "--server", server.url, "--token", "as_nope"])
    assert refused.exit_code != 0
    assert "refused the token" in refused.output
    assert len(refused.output.strip().splitlines()) == 1
    neither = runner.invoke(main, [*home, "sync"])
    assert neither.exit_code != 0
    assert "give either a mesh directory or --server URL" in neither.output
    tokenless = runner.invoke(main, [*home, "sync", "--server", server.url])
    assert tokenless.exit_code == 2
    assert tokenless.output == (
        "Error: --server needs the agent's token: --token-file FILE (or "
        "$AGENT_SAGA_SERVER_TOKEN_FILE or server_token_file in agent-saga.toml)\n"
    )
    nowhere = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    down = runner.invoke(main, [*home, "sync", "--server", nowhere, "--token-file",
                                str(device.token_file), "--timeout", "2"])  # fmt: skip
    assert down.exit_code == 1
    assert re.match(r"NOT SYNCED the server holds 0 of \d+ records: ", down.output)  # no "synced"
    assert len(down.output.strip().splitlines()) == 1
