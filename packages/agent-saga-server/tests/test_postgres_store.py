"""The PostgreSQL store against a real server: changes announced between replicas (LISTEN and
NOTIFY), and readiness while the database is away."""

from __future__ import annotations

import queue
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from agent_saga.testing.postgres import scratch_schema, server_for_tests
from agent_saga_server.store import control
from agent_saga_server.store.approvals import bump
from agent_saga_server.store.db import PostgresDatabase
from agent_saga_server.store.notify import ANY_TOPIC
from plane_testkit import cloud_server
from relay import relay_to


def test_a_change_committed_on_one_replica_is_announced_to_the_other() -> None:
    with server_for_tests() as url, scratch_schema(url) as schema:
        one = PostgresDatabase(url, schema=schema)
        two = PostgresDatabase(url, schema=schema)
        heard: queue.Queue[str] = queue.Queue()
        stop = one.listen(heard.put)
        try:
            assert heard.get(timeout=30) == ANY_TOPIC  # listening now: anything may have changed
            with pytest.raises(RuntimeError), two.transaction() as tx:
                bump(tx, "approvals")
                raise RuntimeError("rolled back")
            control.halt(two, None, "announced")
            assert heard.get(timeout=30) == "killswitch"  # the rolled-back change never was
            assert control.switch_state(one).halted
        finally:
            stop()
            one.close()
            two.close()


def test_ready_is_503_while_the_database_cannot_be_reached(tmp_path: Path) -> None:
    with server_for_tests() as url, scratch_schema(url) as schema:
        parts = urlsplit(url)
        with relay_to(parts.hostname or "127.0.0.1", parts.port or 5432) as relay:
            at = parts.netloc.rsplit("@", 1)[0] + f"@127.0.0.1:{relay.port}"
            relayed = urlunsplit(parts._replace(netloc=at))
            args = ("--store", relayed, "--store-schema", schema)
            with cloud_server(tmp_path / "plane", *args) as running, running.client() as client:
                before = client.get("/v1/ready")
                relay.cut()
                after = [client.get("/v1/ready") for _ in range(3)]
                health = client.get("/v1/health")
    assert (before.status_code, before.json()["database"]) == (200, "postgres")
    assert [answer.status_code for answer in after] == [503, 503, 503]
    assert all(a.json()["detail"].startswith("database unreachable") for a in after)
    assert health.status_code == 200  # alive, not ready
