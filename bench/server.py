"""The control plane (agent-saga-server) against floors measured in the same run.

Starts ``agent-saga cloud-server`` on 127.0.0.1 (SQLite in a temporary home, or ``--store
postgresql://...``: then two replicas on one schema) and prints:

  * ingest: records/s through ``POST /v1/origins/{origin}/records`` (chains checked, sagas
    summarised) in batches of 500, and in the batches the agents' shipper sends (its
    ``BATCH_RECORDS``), against a raw batched insert of the same rows into the same database's
    ``records`` table (500 rows per committed transaction); target >= 0.5x;
  * approval round trip: a kit's IRREVERSIBLE step asks the server, an approver bot long-polls
    the queue and approves at once; from the request's creation on the server to the step
    running in the agent, p50; target < 20 ms (on PostgreSQL the agent asks replica two and
    the bot decides on replica one, so the decision crosses replicas by NOTIFY);
  * halt: an admin halts the fleet; time until every one of 8 agents' kill switches reads
    halted (on PostgreSQL, agents on both replicas, the halt sent to one); target < 1 s;
  * step latency: a one-step COMPENSABLE transaction in a kit whose kill switch is the
    server's pushed state, against the same transaction in a kit on a local home (its switch a
    file); target <= 1.2x.

Each figure and its floor are sampled in alternating rounds, so a noisy neighbour slows both.

Usage: uv run python bench/server.py [--quick] [--store postgresql://...]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
from _timing import p50, timed
from agent_saga import IRREVERSIBLE, AgentKit, read_log
from agent_saga_server.client.shipper import BATCH_RECORDS

AGENT_SAGA = str(Path(sys.executable).parent / "agent-saga")
BATCH = 500


class Plane:
    """One server process: its URL and a client with the admin token."""

    def __init__(self, url: str, admin: str, pid: int = 0) -> None:
        self.url = url
        self.admin = admin
        self.pid = pid

    def cpu(self) -> float:
        """The server process's CPU seconds so far (user + system; 0 where /proc is missing)."""
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token or self.admin}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30, trust_env=False)

    def token(self, scope: str, subject: str) -> str:
        with self.client() as admin:
            answer = admin.post("/v1/tokens", json={"scope": scope, "subject": subject})
            answer.raise_for_status()
            return str(answer.json()["token"])


@contextmanager
def planes(base: Path, store: str | None) -> Iterator[list[Plane]]:
    """One server on SQLite, or two replicas on the PostgreSQL ``store``."""
    args = [] if store is None else ["--store", store, "--store-schema", f"bench_{os.getpid()}"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_SAGA_")}
    processes: list[subprocess.Popen[str]] = []
    try:
        found: list[Plane] = []
        admin = ""
        for n in range(1 if store is None else 2):
            home = base / f"plane{n}"
            process = subprocess.Popen(
                [AGENT_SAGA, "--home", str(home), "cloud-server", "--port", "0", *args],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                env=env,
                cwd=base,
            )
            processes.append(process)
            assert process.stdout is not None
            url = process.stdout.readline().split()[4]
            line = process.stdout.readline()
            if line.startswith("admin token"):
                admin = line.split()[-1]
            found.append(Plane(url, "", process.pid))
        for plane in found:
            plane.admin = admin
            wait_for(answers(plane.url + "/v1/health"))
        yield found
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
            process.wait(15)
            if process.stdout is not None:
                process.stdout.close()
        if store is not None:
            drop_schema(store, f"bench_{os.getpid()}")


def drop_schema(url: str, schema: str) -> None:
    """Remove the schema the servers of this run made (the database is the reader's)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def answers(url: str) -> Callable[[], bool]:
    return lambda: httpx.get(url, trust_env=False).is_success


def wait_for(check: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        time.sleep(0.05)


# -- ingest ------------------------------------------------------------------------------------


def sample_log(base: Path, transactions: int) -> list[dict[str, Any]]:
    """Records of a real log: ``transactions`` two-step COMPENSABLE transactions."""
    kit = AgentKit(home=base / "sample", checkpoints=False)

    @kit.tool(name="crm.tag", compensate=lambda key: None)
    def tag(key: str, note: str) -> str:
        return key

    for i in range(transactions):
        with kit.transaction(f"tagging-{i}"):
            tag(f"a{i}", "customer asked for the premium plan")
            tag(f"b{i}", "follow up next week")
    kit.close()
    return [record.to_json() for record in read_log(base / "sample")]


def ingest_round(
    plane: Plane, token: str, origin: str, records: list[dict[str, Any]], batch: int = BATCH
) -> float:
    """Records/s for shipping ``records`` to ``origin`` in batches of ``batch`` (encoded
    beforehand: the figure is the server's)."""
    bodies = [
        json.dumps({"records": records[i : i + batch]}).encode()
        for i in range(0, len(records), batch)
    ]
    headers = {"Content-Type": "application/json"}
    with plane.client(token) as client:
        start = time.perf_counter()
        for body in bodies:
            answer = client.post(f"/v1/origins/{origin}/records", content=body, headers=headers)
            answer.raise_for_status()
        return len(records) / (time.perf_counter() - start)


def rows_of(records: list[dict[str, Any]], origin: str) -> list[tuple[Any, ...]]:
    def text(value: Any) -> str:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    return [
        (
            origin, r["seq"], r["ts"], r["kind"], r["saga"], r["hash"], r["prev"], text(r["data"]),
            r["v"], r.get("salts"),
        )
        for r in records
    ]  # fmt: skip


RAW_INSERT = (
    "INSERT INTO records (origin, seq, ts, kind, saga, hash, prev, data, v, salts) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
"""The floor: the same rows into the server's ``records`` table (new origins), unchecked."""


class RawSqlite:
    """The floor on SQLite: batched inserts into the server's own database file."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.execute("PRAGMA busy_timeout=30000")

    def round(self, rows: list[tuple[Any, ...]]) -> float:
        start = time.perf_counter()
        for i in range(0, len(rows), BATCH):
            self.conn.execute("BEGIN IMMEDIATE")
            self.conn.executemany(RAW_INSERT, rows[i : i + BATCH])
            self.conn.execute("COMMIT")
        return len(rows) / (time.perf_counter() - start)

    def close(self) -> None:
        self.conn.close()


class RawPostgres:
    """The floor on PostgreSQL: batched inserts into the server's schema."""

    def __init__(self, url: str, schema: str) -> None:
        import psycopg

        self.conn = psycopg.connect(url)
        self.conn.execute(f"SET search_path TO {schema}")
        self.conn.commit()

    def round(self, rows: list[tuple[Any, ...]]) -> float:
        start = time.perf_counter()
        for i in range(0, len(rows), BATCH):
            with self.conn.cursor() as cursor:
                cursor.executemany(RAW_INSERT.replace("?", "%s"), rows[i : i + BATCH])
            self.conn.commit()
        return len(rows) / (time.perf_counter() - start)

    def close(self) -> None:
        self.conn.close()


def bench_ingest(
    plane: Plane, base: Path, store: str | None, transactions: int, rounds: int
) -> tuple[float, float, float]:
    """Median records/s: served in batches of 500, served in the shipper's batches, floor."""
    records = sample_log(base, transactions)
    raw: RawSqlite | RawPostgres = (
        RawSqlite(base / "plane0" / "control-plane.sqlite3")
        if store is None
        else RawPostgres(store, f"bench_{os.getpid()}")
    )
    served, shipped, floor = [], [], []
    cpu = {"500": 0.0, "shipper": 0.0}
    try:
        for n in range(rounds):
            origin = f"ingest-{n}"
            token = plane.token("agent", origin)
            before = plane.cpu()
            served.append(ingest_round(plane, token, origin, records))
            cpu["500"] += plane.cpu() - before
            floor.append(raw.round(rows_of(records, f"raw-{n}")))
            origin = f"shipped-{n}"
            token = plane.token("agent", origin)
            before = plane.cpu()
            shipped.append(ingest_round(plane, token, origin, records, BATCH_RECORDS))
            cpu["shipper"] += plane.cpu() - before
    finally:
        raw.close()
    for batch, seconds in cpu.items():
        INGEST_CPU[batch] = seconds / (rounds * len(records)) * 1e6
    return statistics.median(served), statistics.median(shipped), statistics.median(floor)


INGEST_CPU: dict[str, float] = {}
"""Server process CPU microseconds per ingested record: in batches of 500, in the shipper's."""


# -- approvals, halt, steps ------------------------------------------------------------------


def bench_approvals(plane: Plane, deciding: Plane, base: Path, count: int) -> list[float]:
    """Milliseconds from a request's creation on ``plane`` to the step running; the bot
    decides through ``deciding``."""
    kit = AgentKit(home=base / "approving", server=plane.url, token=plane.token("agent", "asks"))
    ran: list[float] = []

    @kit.tool(name="bank.wire", semantics=IRREVERSIBLE)
    def wire(amount: int) -> int:
        ran.append(time.time())
        return amount

    created: dict[str, float] = {}
    stop = threading.Event()
    approver = plane.token("approver", "bot")

    def approve() -> None:
        with deciding.client(approver) as client:
            while not stop.is_set():
                params: dict[str, str | float] = {"status": "pending", "wait": 1.0}
                for request in client.get("/v1/approvals", params=params).json()["approvals"]:
                    created[request["id"]] = request["requested_at"]
                    vote = {"decision": "approve"}
                    client.post(f"/v1/approvals/{request['id']}/votes", json=vote)

    bot = threading.Thread(target=approve, daemon=True)
    bot.start()
    trips = []
    servers = {plane.pid: plane, deciding.pid: deciding}.values()
    server_before = sum(p.cpu() for p in servers)
    own_before = time.process_time()
    try:
        for i in range(count):
            before = len(created)
            with kit.transaction(f"payout-{i}"):
                wire(i)
            assert len(created) > before  # the bot saw it before the step could run
            newest = max(created.values())
            trips.append((ran[-1] - newest) * 1000)
    finally:
        TRIP_CPU["server"] = (sum(p.cpu() for p in servers) - server_before) / count * 1e3
        TRIP_CPU["agent and approver"] = (time.process_time() - own_before) / count * 1e3
        stop.set()
        bot.join(5)
        kit.close()
    return trips


TRIP_CPU: dict[str, float] = {}
"""CPU milliseconds per approval round trip: the server process(es), and this process (the
agent and the approver bot, both clients)."""


def bench_halt(planes_: list[Plane], base: Path, agents: int, rounds: int) -> list[float]:
    """Seconds from the halt call returning to every agent's switch reading halted."""
    kits = [
        AgentKit(
            home=base / f"halting{i}",
            server=planes_[i % len(planes_)].url,
            token=planes_[0].token("agent", f"halting-{i}"),
            checkpoints=False,
        )
        for i in range(agents)
    ]
    reached = []
    try:
        with planes_[0].client() as admin:
            for _ in range(rounds):
                admin.post("/v1/killswitch/halt", json={"reason": "bench"}).raise_for_status()
                start = time.monotonic()
                while not all(kit.runtime.kill_switch.state().halted for kit in kits):
                    time.sleep(0.001)
                reached.append(time.monotonic() - start)
                admin.post("/v1/killswitch/resume", json={"reason": "bench"}).raise_for_status()
                while any(kit.runtime.kill_switch.state().halted for kit in kits):
                    time.sleep(0.001)
    finally:
        for kit in kits:
            kit.close()
    return reached


def one_step_transaction(kit: AgentKit) -> Callable[[], None]:
    @kit.tool(name="crm.note", compensate=lambda text: None)
    def note(text: str) -> str:
        return text

    def one_step() -> None:
        with kit.transaction("note"):
            note("x")

    timed(one_step, 20)  # warm
    return one_step


def bench_steps(plane: Plane, base: Path, count: int, rounds: int) -> tuple[list[int], list[int]]:
    """Nanosecond timings of a one-step transaction: server-backed kit, local kit."""
    remote = AgentKit(home=base / "remote", server=plane.url, token=plane.token("agent", "steps"))
    local = AgentKit(home=base / "local")
    remote_step, local_step = one_step_transaction(remote), one_step_transaction(local)
    samples: tuple[list[int], list[int]] = ([], [])
    for _ in range(rounds):
        samples[0].extend(timed(remote_step, count // rounds))
        samples[1].extend(timed(local_step, count // rounds))
    remote.close()
    local.close()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    parser.add_argument("--store", default=None, help="postgresql://... (two replicas)")
    args = parser.parse_args()
    quick = args.quick
    with ExitStack() as stack:
        base = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="agent-saga-bench-")))
        found = stack.enter_context(planes(base, args.store))
        plane = found[0]
        transactions, rounds = (300, 3) if quick else (1500, 5)
        served, shipped, floor = bench_ingest(plane, base, args.store, transactions, rounds)
        trips = bench_approvals(found[-1], plane, base, 20 if quick else 100)
        halts = bench_halt(found, base, 8, 5 if quick else 20)
        remote, local = bench_steps(plane, base, 200 if quick else 1000, 5)
    where = "SQLite" if args.store is None else "PostgreSQL, two replicas"
    ingest_ratio = served / floor
    shipped_ratio = shipped / floor
    trip = statistics.median(trips)
    halt_max = max(halts)
    step_ratio = p50(remote) / p50(local)
    rows = [
        ("ingest, records/s, batches of 500", f"{served:,.0f}", f"{ingest_ratio:.2f}x raw "
         f"batched insert ({floor:,.0f}/s), target >= 0.5x: {ok(ingest_ratio >= 0.5)}"),
        (f"ingest, records/s, shipper's {BATCH_RECORDS}", f"{shipped:,.0f}",
         f"{shipped_ratio:.2f}x the same floor, target >= 0.5x: {ok(shipped_ratio >= 0.5)}"),
        ("  server CPU per record", f"{INGEST_CPU.get('500', 0):.0f} us",
         f"batches of {BATCH_RECORDS}: {INGEST_CPU.get('shipper', 0):.0f} us"),
        ("approval round trip p50", f"{trip:.1f} ms", f"p90 {quantile(trips, 0.9):.1f} ms, "
         f"target < 20 ms: {ok(trip < 20)}"),
        ("  CPU per round trip", f"{sum(TRIP_CPU.values()):.1f} ms",
         ", ".join(f"{name} {ms:.1f} ms" for name, ms in TRIP_CPU.items())),
        ("halt -> 8 agents refusing, worst", f"{halt_max * 1000:.0f} ms",
         f"p50 {statistics.median(halts) * 1000:.0f} ms, target < 1 s: {ok(halt_max < 1)}"),
        ("one-step transaction, server switch", f"{p50(remote):.0f} us",
         f"{step_ratio:.2f}x the local home ({p50(local):.0f} us), target <= 1.2x: "
         f"{ok(step_ratio <= 1.2)}"),
    ]  # fmt: skip
    print(f"agent-saga control plane on {where} ({'quick' if quick else 'full'} run)")
    width = max(len(r[0]) for r in rows)
    for name, value, note in rows:
        print(f"  {name:<{width}}  {value:>10}  {note}")


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ok(passed: bool) -> str:
    return "met" if passed else "MISSED"


if __name__ == "__main__":
    main()
