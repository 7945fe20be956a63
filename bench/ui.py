"""The dashboard's two speed targets, each against a floor measured in the same run.

1. The sagas page over a 100,000-saga log.

Fills a control plane's SQLite database (in a temporary directory) with 100,000 sagas (each
with one tool), logs in to the dashboard, and samples in alternating rounds:

  * page: ``GET /ui/sagas`` through the whole app (Host check, session lookup, the list query,
    the template), first page, a page deep in the list (by cursor) and a tool filter;
  * floor: the list query alone (:func:`agent_saga_server.store.sagas.list_sagas`, 50 sagas).

Prints p50 in milliseconds and the ratio page/floor, and the process CPU time per page.
Target: the page's p50 < 300 ms. The app runs in-process (Starlette's test client): server
time, no network.

2. SSE fan-out (``--part sse``): a real ``agent-saga ui`` process on a temporary home, with
50 browsers' event streams (``/ui/live/stream``, one thread each) open; a kit on the home runs
one-step sagas; for each saga, the time from the kit's return (its records are in the home's
log) until every client has received its ``saga.end`` record (shipping, ingest, the stream's
tail-following, and the delivery to all). Floor, in alternating rounds: the same with one
client. Prints p50 and max per record, and the server's CPU time per record.
Target: every record delivered to all 50 within 1 s.

Usage: uv run python bench/ui.py [--quick] [--part sagas|sse|both]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from _sse_fanout import fan_out
from _timing import p50, timed
from agent_saga_server.api.app import create_app
from agent_saga_server.dashboard import mint_login
from agent_saga_server.store.db import Database, open_database
from agent_saga_server.store.sagas import SagaFilter, list_sagas
from fastapi.testclient import TestClient

SAGAS = 100_000
STATUSES = ("committed", "rolled_back", "running", "needs_human")


def fill(db: Database, count: int) -> None:
    rows = []
    tools = []
    for i in range(count):
        saga = f"saga-{i:07d}"
        started = 1_700_000_000_000 + i * 1000
        origin = f"fleet-{i % 20}"
        rows.append((origin, saga, f"job {i}", STATUSES[i % 4], started, None, i * 10 + 1, i * 10))
        tools.append((origin, saga, f"tool.{i % 50}"))
    with db.transaction() as tx:
        tx.execute_many(
            "INSERT INTO sagas (origin, saga, name, status, started, ended, first_seq, last_seq) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        tx.execute_many("INSERT INTO saga_tools (origin, saga, tool) VALUES (?, ?, ?)", tools)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="10,000 sagas, fewer rounds")
    parser.add_argument("--part", choices=("sagas", "sse", "both"), default="both")
    args = parser.parse_args()
    if args.part in ("sagas", "both"):
        sagas_page(args.quick)
    if args.part in ("sse", "both"):
        fan_out(args.quick)


def sagas_page(quick: bool) -> None:
    count, rounds, n = (10_000, 3, 10) if quick else (SAGAS, 5, 20)
    with tempfile.TemporaryDirectory() as home:
        db = open_database(None, Path(home))
        try:
            fill(db, count)
            client = TestClient(create_app(db), base_url="http://127.0.0.1:8765")
            with client:
                login = client.get(f"/ui/login?token={mint_login(db, 'bench', 'auditor')}")
                assert login.status_code == 200, login.status_code
                middle = f"{1_700_000_000_000 + (count // 2) * 1000}~fleet-0~saga-{count // 2:07d}"
                pages = {
                    "first page": "/ui/sagas",
                    "deep page": f"/ui/sagas?cursor={middle}",
                    "tool filter": "/ui/sagas?tool=tool.7",
                }
                for name, path in pages.items():
                    assert client.get(path).status_code == 200
                    page_samples: list[int] = []
                    floor_samples: list[int] = []
                    cpu = 0.0
                    for _ in range(rounds):
                        start = time.process_time()
                        page_samples += timed(lambda p=path: client.get(p), n)  # type: ignore[misc]
                        cpu += time.process_time() - start
                        floor_samples += timed(lambda: list_sagas(db, SagaFilter(), 50, None), n)
                    page_ms, floor_ms = p50(page_samples) / 1000, p50(floor_samples) / 1000
                    print(
                        f"{name:12} over {count:,} sagas: p50 {page_ms:7.2f} ms "
                        f"(floor, the list query alone: {floor_ms:6.2f} ms; "
                        f"ratio {page_ms / floor_ms:5.1f}x; CPU {cpu * 1000 / (rounds * n):6.2f} "
                        f"ms a page; target < 300 ms)"
                    )
        finally:
            db.close()


if __name__ == "__main__":
    main()
