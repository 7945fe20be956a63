"""Platform rules of the file store: network file systems, macOS fsync, crashes during repair."""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
from pathlib import Path

import pytest
from agent_saga import ConfigurationError, Entry, FileLogStore, verify_file
from agent_saga._log.fs import OsFileSystem, mount_fs_type
from agent_saga.testing import SimCrash, SimFileSystem

MOUNTINFO = """\
22 1 8:1 / / rw,relatime - ext4 /dev/vda rw
35 22 0:31 / /mnt/share rw,relatime - nfs4 server:/export rw,vers=4.2
36 35 0:32 / /mnt/share/local rw - tmpfs tmpfs rw
37 22 0:33 / /srv/with\\040space rw - cifs //host/share rw
"""


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/home/agent/.agent-saga", "ext4"),
        ("/mnt/share/team/.agent-saga", "nfs4"),
        ("/mnt/share/local/x", "tmpfs"),
        ("/mnt/shared", "ext4"),  # a prefix of a mount point's name is not inside it
        ("/srv/with space/h", "cifs"),
    ],
)
def test_mount_type_is_the_longest_matching_mount(tmp_path: Path, path: str, expected: str) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(MOUNTINFO)
    assert mount_fs_type(path, str(info)) == expected


class NetworkFs(OsFileSystem):
    def fs_type(self, path: str) -> str | None:
        return "nfs4"


def test_network_file_systems_are_refused_with_a_clear_message(home: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"nfs4 file system.*PostgreSQL"):
        FileLogStore(home, fs=NetworkFs())
    with FileLogStore(home, fs=NetworkFs(), allow_network_fs=True) as store:
        assert store.describe()["durable"] is True


def test_macos_uses_full_fsync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(fcntl, "F_FULLFSYNC", 51, raising=False)

    def record(fd: int, op: int, *args: object) -> int:
        calls.append((fd, op))
        return 0

    monkeypatch.setattr(fcntl, "fcntl", record)
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        OsFileSystem().fsync(fd)
    finally:
        os.close(fd)
    assert calls == [(fd, 51)]


def torn_log() -> SimFileSystem:
    """A simulated disk whose log has two synced records and a torn third one."""
    fs = SimFileSystem()
    store = FileLogStore("/h", fs=fs, preallocate=512)
    store.append([Entry("t", None, {"n": 1}, 0), Entry("t", None, {"n": 2}, 0)], sync=True)
    store.append([Entry("t", None, {"n": 3, "pad": "x" * 300}, 0)], sync=False)
    for file in fs.files.values():  # the third record is torn: only its first half reached disk
        if file.pending:
            op, offset, data = file.pending[-1]
            file.pending[-1] = (op, offset, data[: len(data) // 2])
    fs.power_loss = lambda: _torn(fs)  # type: ignore[method-assign]
    fs.power_loss()
    return fs


def _torn(fs: SimFileSystem) -> None:
    fs._fds.clear()
    fs._locks.clear()
    for file in fs.files.values():
        image = bytearray(file.durable)
        for _op, offset, data in file.pending:
            image[offset : offset + len(data)] = data
        file.durable, file.live, file.pending = image, bytearray(image), []


@pytest.mark.parametrize("crash_at", range(12))
def test_a_crash_during_repair_repairs_again(crash_at: int) -> None:
    fs = torn_log()
    fs.crash_after = fs.operations + crash_at
    with contextlib.suppress(SimCrash):
        FileLogStore("/h", fs=fs, preallocate=512)
    fs.crash_after = None
    fs._fds.clear()
    fs._locks.clear()
    store = FileLogStore("/h", fs=fs, preallocate=512)
    data = [r.data.get("n") for r in store.records() if r.kind == "t"]
    assert data == [1, 2]
    kinds = [r.kind for r in store.records()]
    assert kinds.count("store.repaired") <= 1 + (crash_at > 0)
    store.append([Entry("t", None, {"n": 4}, 0)], sync=True)
    assert [r.data.get("n") for r in store.records() if r.kind == "t"] == [1, 2, 4]
    assert store.verify().ok


def test_verify_file_on_a_real_disk_after_repair(home: Path) -> None:
    with FileLogStore(home) as store:
        store.append([Entry("t", None, {"n": 1}, 0)], sync=True)
    with (home / "log.jsonl").open("ab") as handle:
        handle.write(b'{"data":{"n":2},"ha')
    with FileLogStore(home) as store:
        assert store.repairs
    assert verify_file(home / "log.jsonl").ok
