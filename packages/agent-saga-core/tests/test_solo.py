"""Solo mode of the file store: a writer alone on its home keeps ``log.lock`` between rounds.

Every test checks the promises that must survive it: other processes' writes are never lost or
interleaved, the chain stays continuous, and a holder that is idle, stopped or SIGKILLed never
keeps the home from another process.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from agent_saga import Entry, FileLogStore, verify_file

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="flock and FIFOs are POSIX")

_WRITER = """
import os, sys, time
from pathlib import Path
from agent_saga import Entry, FileLogStore
home, name, n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
go, stop = Path(sys.argv[4]), Path(sys.argv[5])
store = FileLogStore(home, solo=True)
print("open", store.solo_active, flush=True)
while not go.exists():
    time.sleep(0.005)
for i in range(n):
    store.append([Entry("test", None, {"p": name, "i": i}, i)], sync=True)
print("done", flush=True)
while not stop.exists():
    time.sleep(0.005)
store.append([Entry("test", None, {"p": name, "i": n}, n)], sync=True)
store.close()
print("closed", flush=True)
"""


def _entry(name: str, i: int) -> Entry:
    return Entry("test", None, {"p": name, "i": i}, i)


def _start(home: Path, name: str, n: int, flags: Path) -> subprocess.Popen[str]:
    go, stop = flags / f"{name}.go", flags / f"{name}.stop"
    return subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(home), name, str(n), str(go), str(stop)],
        stdout=subprocess.PIPE,
        text=True,
    )


def _line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    return proc.stdout.readline().strip()


def _finish(proc: subprocess.Popen[str]) -> int:
    code = proc.wait(timeout=30)
    if proc.stdout is not None:
        proc.stdout.close()
    return code


def _seen(home: Path) -> list[tuple[str, int]]:
    report = verify_file(home / "log.jsonl")
    assert report.ok, report.error
    with FileLogStore(home, solo=False) as store:
        return [(str(r.data["p"]), int(str(r.data["i"]))) for r in store.records()]


def _solo(store: FileLogStore) -> bool:
    return store.solo_active


def _lock_taken(home: Path) -> bool:
    """Whether some process holds ``log.lock`` (tried without entering the waiting room)."""
    fd = os.open(home / "log.lock", os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_a_lone_store_keeps_the_lock_and_gives_it_back_on_close(tmp_path: Path) -> None:
    home = tmp_path / "home"
    store = FileLogStore(home, solo=True)
    store.append([_entry("a", 0)], sync=True)
    assert store.solo_active
    assert _lock_taken(home)
    store.close()
    assert not _lock_taken(home)
    assert _seen(home) == [("a", 0)]


def test_reading_in_the_holders_process_does_not_end_solo_mode(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with FileLogStore(home, solo=True) as store:
        for i in range(3):
            store.append([_entry("a", i)], sync=True)
            assert [r.data["i"] for r in store.records()] == list(range(i + 1))
        assert store.solo_active
        assert store._solo is not None
        assert store._solo.entries == 1  # entered once, never asked to leave


def test_second_store_in_one_process_takes_over_and_both_continue_one_chain(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    first = FileLogStore(home, solo=True)
    first.append([_entry("a", 0)], sync=True)
    assert _solo(first)
    second = FileLogStore(home, solo=True)  # waits: the first lets go
    assert not _solo(first)
    for i in range(1, 4):
        first.append([_entry("a", i)], sync=True)
        second.append([_entry("b", i)], sync=True)
        assert not (_solo(first) and _solo(second))
    first.close()
    second.close()
    assert _seen(home) == [("a", 0)] + [(p, i) for i in range(1, 4) for p in ("a", "b")]


@pytest.mark.parametrize("order", ["holder-first", "newcomer-first", "together"])
def test_two_processes_on_one_home_lose_nothing(tmp_path: Path, order: str) -> None:
    """A solo holder running and another process opening the home, in every order: both
    write, every acknowledged record is there once, and the chain verifies."""
    home, n = tmp_path / "home", 15
    FileLogStore(home, solo=True).close()
    a = _start(home, "a", n, tmp_path)
    assert _line(a) == "open True"  # alone: solo at once
    if order == "holder-first":
        (tmp_path / "a.go").touch()
        assert _line(a) == "done"  # a is idle and solo, holding the lock
        assert _lock_taken(home)
    b = _start(home, "b", n, tmp_path)
    assert _line(b).startswith("open")  # the idle holder let go when asked
    if order == "newcomer-first":
        (tmp_path / "b.go").touch()
        assert _line(b) == "done"
    (tmp_path / "a.go").touch()
    (tmp_path / "b.go").touch()
    if order != "holder-first":
        assert _line(a) == "done"
    if order != "newcomer-first":
        assert _line(b) == "done"
    (tmp_path / "a.stop").touch()
    (tmp_path / "b.stop").touch()
    assert [_line(a), _line(b)] == ["closed", "closed"]
    assert [_finish(a), _finish(b)] == [0, 0]
    seen = _seen(home)
    for name in ("a", "b"):
        assert [i for p, i in seen if p == name] == list(range(n + 1))


def _wait_stopped(pid: int) -> None:
    deadline = time.monotonic() + 30
    tasks = Path(f"/proc/{pid}/task")
    while not all(
        (t / "stat").read_text().rsplit(")", 1)[1].split()[0] == "T" for t in tasks.iterdir()
    ):
        assert time.monotonic() < deadline, f"process {pid} did not stop"
        time.sleep(0.01)


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc to see the stop")
def test_a_stopped_holder_killed_lets_a_waiting_opener_in(tmp_path: Path) -> None:
    """A holder that cannot look into the waiting room (stopped) blocks an opener only until
    it dies: the kernel releases its lock on SIGKILL, and its synced records stay."""
    home = tmp_path / "home"
    a = _start(home, "a", 5, tmp_path)
    assert _line(a) == "open True"
    (tmp_path / "a.go").touch()
    assert _line(a) == "done"
    os.kill(a.pid, signal.SIGSTOP)
    _wait_stopped(a.pid)  # every thread: a stop takes effect when a thread next runs
    opened: list[FileLogStore] = []
    opener = threading.Thread(target=lambda: opened.append(FileLogStore(home, solo=True)))
    opener.start()
    opener.join(timeout=0.5)
    assert opener.is_alive()  # the holder is stopped: it cannot let go
    os.kill(a.pid, signal.SIGKILL)
    assert _finish(a) == -signal.SIGKILL
    opener.join(timeout=10)
    assert not opener.is_alive()
    store = opened[0]
    store.append([_entry("b", 0)], sync=True)
    store.close()
    assert _seen(home) == [("a", i) for i in range(5)] + [("b", 0)]


_FORKING_HOLDER = """
import os, sys, time
from agent_saga import Entry, FileLogStore
store = FileLogStore(sys.argv[1], solo=True)
store.append([Entry("test", None, {"p": "a", "i": 0}, 0)], sync=True)
assert store.solo_active
child = os.fork()
if child == 0:
    time.sleep(60)
    os._exit(0)
print(child, flush=True)
time.sleep(60)
"""


def test_a_child_forked_by_a_killed_holder_does_not_keep_the_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    holder = subprocess.Popen(
        [sys.executable, "-c", _FORKING_HOLDER, str(home)], stdout=subprocess.PIPE, text=True
    )
    child = int(_line(holder))
    try:
        os.kill(holder.pid, signal.SIGKILL)
        assert _finish(holder) == -signal.SIGKILL
        deadline = time.monotonic() + 5
        while _lock_taken(home):  # the forked child still runs, with its copy of the lock fd
            assert time.monotonic() < deadline, "the forked child kept log.lock"
            time.sleep(0.01)
        with FileLogStore(home, solo=True) as store:
            store.append([_entry("b", 0)], sync=True)
    finally:
        os.kill(child, signal.SIGKILL)
    assert _seen(home) == [("a", 0), ("b", 0)]


def test_solo_false_takes_the_lock_per_round(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with FileLogStore(home, solo=False) as store:
        store.append([_entry("a", 0)], sync=True)
        assert not store.solo_active
        assert not _lock_taken(home)
