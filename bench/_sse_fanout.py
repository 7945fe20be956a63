"""SSE fan-out of the dashboard's live log (``bench/ui.py --part sse``): see that module."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from agent_saga import AgentKit
from agent_saga_server.dashboard import mint_login
from agent_saga_server.store.db import open_database

AGENT_SAGA = str(Path(sys.executable).parent / "agent-saga")
CLIENTS = 50
TARGET_S = 1.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Listener(threading.Thread):
    """One browser's event stream: when each saga's ``saga.end`` record arrived."""

    def __init__(self, url: str, cookie: str) -> None:
        super().__init__(daemon=True)
        self.client = httpx.Client(base_url=url, trust_env=False, timeout=None)
        self.client.cookies.set("asg_ui", cookie, path="/ui")
        self.arrived: dict[str, float] = {}
        self.ready = threading.Event()
        self.stop = False

    def run(self) -> None:
        try:
            with self.client.stream("GET", "/ui/live/stream") as stream:
                self.ready.set()
                for line in stream.iter_lines():
                    if self.stop:
                        return
                    if line.startswith("data: ") and '"saga.end"' in line:
                        self.arrived[str(json.loads(line[6:])["saga"])] = time.monotonic()
        except httpx.HTTPError:
            if not self.stop:
                raise

    def close(self) -> None:
        self.stop = True
        self.client.close()


@contextmanager
def ui_server(home: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    process = subprocess.Popen(
        [AGENT_SAGA, "--home", str(home), "ui", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env={**os.environ, "TMPDIR": str(home)}, cwd=home,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        process.stdout.readline()
        yield first.split()[3].removesuffix("/ui/"), process
    finally:
        process.terminate()
        process.wait(10)


def login_cookie(url: str, home: Path) -> str:
    db = open_database(None, home)
    try:
        token = mint_login(db, "bench", "auditor")
    finally:
        db.close()
    with httpx.Client(base_url=url, trust_env=False) as client:
        answer = client.get(f"/ui/login?token={token}", follow_redirects=False)
        return str(answer.cookies["asg_ui"])


def note(text: str) -> str:
    return text


def one_round(url: str, cookie: str, kit: AgentKit, clients: int, sagas: int, pid: int
              ) -> tuple[list[float], float]:  # fmt: skip
    """Per saga, seconds until all ``clients`` had its ``saga.end``; server CPU s per saga."""
    listeners = [Listener(url, cookie) for _ in range(clients)]
    for listener in listeners:
        listener.start()
    for listener in listeners:
        listener.ready.wait(30)
    time.sleep(0.3)  # every stream at the tail
    step = kit.tool(name="bench.note", compensate=lambda text: None)(note)
    latencies = []
    cpu_before = cpu_seconds(pid)
    for _ in range(sagas):
        with kit.transaction("fan-out") as saga:
            step(text="x")
        done = time.monotonic()
        deadline = done + 10
        while any(saga.id not in lis.arrived for lis in listeners):
            if time.monotonic() > deadline:
                raise RuntimeError("a client never received a record")
            time.sleep(0.002)
        latencies.append(max(lis.arrived[saga.id] for lis in listeners) - done)
    cpu = (cpu_seconds(pid) - cpu_before) / sagas
    for listener in listeners:
        listener.close()
    return latencies, cpu


def fan_out(quick: bool) -> None:
    rounds, sagas = (2, 5) if quick else (4, 15)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        with ui_server(home) as (url, process):
            cookie = login_cookie(url, home)
            kit = AgentKit(home=home, checkpoints=False)
            try:
                fan: list[float] = []
                floor: list[float] = []
                cpu_fan: list[float] = []
                cpu_floor: list[float] = []
                for _ in range(rounds):
                    lat, cpu = one_round(url, cookie, kit, 1, sagas, process.pid)
                    floor += lat
                    cpu_floor.append(cpu)
                    lat, cpu = one_round(url, cookie, kit, CLIENTS, sagas, process.pid)
                    fan += lat
                    cpu_fan.append(cpu)
            finally:
                kit.close()
    f50, fmax = statistics.median(fan) * 1000, max(fan) * 1000
    b50, bmax = statistics.median(floor) * 1000, max(floor) * 1000
    cpu_a, cpu_1 = statistics.median(cpu_fan) * 1000, statistics.median(cpu_floor) * 1000
    verdict = "met" if fmax < TARGET_S * 1000 else "NOT met"
    print(
        f"SSE fan-out to {CLIENTS} clients: to all, p50 {f50:6.1f} ms, max {fmax:6.1f} ms "
        f"over {len(fan)} records (floor, one client: p50 {b50:6.1f} ms, max {bmax:6.1f} ms; "
        f"ratio p50 {f50 / b50:4.1f}x); server CPU a record: {cpu_a:.1f} ms ({cpu_1:.1f} ms "
        f"with one client); target, all within {TARGET_S * 1000:.0f} ms: {verdict}"
    )
