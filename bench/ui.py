"""The dashboard's sagas page over a 100,000-saga log, against a floor measured in the same run.

Fills a control plane's SQLite database (in a temporary directory) with 100,000 sagas (each
with one tool), logs in to the dashboard, and samples in alternating rounds:

  * page: ``GET /ui/sagas`` through the whole app (Host check, session lookup, the list query,
    the template), first page, a page deep in the list (by cursor) and a tool filter;
  * floor: the list query alone (:func:`agent_saga_server.store.sagas.list_sagas`, 50 sagas).

Prints p50 in milliseconds and the ratio page/floor. Target: the page's p50 < 300 ms.
The app runs in-process (Starlette's test client): server time, no network.

Usage: uv run python bench/ui.py [--quick]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

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
    args = parser.parse_args()
    count, rounds, n = (10_000, 3, 10) if args.quick else (SAGAS, 5, 20)
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
                    for _ in range(rounds):
                        page_samples += timed(lambda p=path: client.get(p), n)  # type: ignore[misc]
                        floor_samples += timed(lambda: list_sagas(db, SagaFilter(), 50, None), n)
                    page_ms, floor_ms = p50(page_samples) / 1000, p50(floor_samples) / 1000
                    print(
                        f"{name:12} over {count:,} sagas: p50 {page_ms:7.2f} ms "
                        f"(floor, the list query alone: {floor_ms:6.2f} ms; "
                        f"ratio {page_ms / floor_ms:5.1f}x; target < 300 ms)"
                    )
        finally:
            db.close()


if __name__ == "__main__":
    main()
