"""What a SIGKILL-harness child costs to start: forked from the test process, or from the fork
server the harness uses (``packages/agent-saga-core/tests/kill_children.py``).

Each round starts ``--children`` children one after the other, waits for each one's ``ready``,
SIGKILLs it and reaps it, as ``test_kill_harness.py`` does; rounds alternate between the two
ways. Printed: CPU milliseconds per child (this process, the fork server and every reaped child;
less sensitive to a loaded machine than wall time) and wall milliseconds per child, as ranges
over the rounds, and the ratio fork server / fork from here. ``--heavy`` imports the frameworks
other tests load first (LangChain, LlamaIndex, boto3, moto, ...), as a pytest worker that ran
them has before it reaches the harness. The fork server's own start is not in the figures.

    uv run python bench/kill_harness_children.py [--rounds 4] [--children 20] [--heavy]
"""

from __future__ import annotations

import argparse
import importlib
import os
import resource
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1] / "packages" / "agent-saga-core" / "tests"
HEAVY = ("langchain_core", "langgraph", "llama_index.core", "boto3", "moto", "flask", "starlette")


def cpu_here() -> float:
    own, reaped = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


def cpu_of(pid: int) -> float:
    """CPU seconds of ``pid`` and of the children it reaped (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def from_here(kc: Any, home: Path, ledger: Any, seed: int) -> None:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read_fd)
        kc.child(kc.Backend(), home, ledger, seed, False, write_fd)
    os.close(write_fd)
    assert os.read(read_fd, 8) == b"ready -\n"
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    os.close(read_fd)


def from_server(server: Any, kc: Any, home: Path, ledger: Any, seed: int) -> None:
    pid, read_fd = server.fork(kc.Backend(), home, ledger, seed, recovery_only=False)
    assert os.read(read_fd, 8) == b"ready -\n"
    os.kill(pid, signal.SIGKILL)
    server.wait(pid)
    os.close(read_fd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--children", type=int, default=20)
    parser.add_argument("--heavy", action="store_true")
    args = parser.parse_args()
    if args.heavy:
        for name in HEAVY:
            importlib.import_module(name)
    sys.path.insert(0, str(TESTS))
    kc = importlib.import_module("kill_children")
    figures: dict[str, list[tuple[float, float]]] = {"fork here": [], "fork server": []}
    with tempfile.TemporaryDirectory() as scratch, kc.ForkServer(Path(scratch) / "s") as server:
        root = Path(scratch)
        (root / "ledger").mkdir()
        ledger = kc.Ledger(root / "ledger")
        kc.make_kit(kc.Backend(), root / "home", ledger).close()  # this process is warm too
        server_pid = server._server.pid
        for n in range(args.rounds * 2):
            way = "fork here" if n % 2 == 0 else "fork server"
            cpu, wall = cpu_here() + cpu_of(server_pid), time.perf_counter()
            for seed in range(args.children):
                if way == "fork here":
                    from_here(kc, root / "home", ledger, seed)
                else:
                    from_server(server, kc, root / "home", ledger, seed)
            spent = cpu_here() + cpu_of(server_pid) - cpu
            figures[way].append(
                (1000 * spent / args.children, 1000 * (time.perf_counter() - wall) / args.children)
            )
    for way, rows in figures.items():
        cpus, walls = sorted(c for c, _ in rows), sorted(w for _, w in rows)
        print(
            f"{way:12} cpu {cpus[0]:.1f}-{cpus[-1]:.1f} ms/child, "
            f"wall {walls[0]:.0f}-{walls[-1]:.0f} ms/child"
        )
    ratios = sorted(
        s[0] / h[0] for h, s in zip(figures["fork here"], figures["fork server"], strict=True)
    )
    print(f"cpu ratio fork server / fork here: {ratios[0]:.2f}-{ratios[-1]:.2f}")


if __name__ == "__main__":
    main()
