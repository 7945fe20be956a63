"""Fleet mode on a real PostgreSQL server: the log store, owners, leases and the kill switch.

The server is the one named by ``AGENT_SAGA_TEST_PG_URL`` (``.ci/run`` starts Debian's server
and sets it) or a throwaway cluster started from the local PostgreSQL binaries. Without either
the tests are skipped, except under CI, where they fail. Every test works in its own schema,
dropped afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from agent_saga import (
    AgentKit,
    ConfigurationError,
    CorruptLogError,
    Entry,
    FileLogStore,
    HaltedError,
    Kind,
    SagaRolledBack,
    SagaStatus,
    SequentialIds,
    StoreFailedError,
)
from agent_saga._gate.killswitch_pg import PostgresKillSwitch
from agent_saga._postgres.store import PostgresLogStore
from agent_saga.testing import Ledger
from agent_saga.testing.postgres import (
    ThrowawayCluster,
    find_bindir,
)
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict


@pytest.fixture
def store(pg_url: str, schema: str) -> Iterator[PostgresLogStore]:
    with PostgresLogStore(pg_url, schema=schema) as opened:
        yield opened


def sql_exec(url: str, query: str, schema: str, *params: object) -> list[tuple[Any, ...]]:
    """Run ``query`` with ``{s}`` standing for the schema, as an outsider would."""
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(sql.SQL(query).format(s=sql.Identifier(schema)), params)
        return cursor.fetchall() if cursor.description else []


def entry(i: int, **data: Any) -> Entry:
    return Entry("test.step", f"saga-{i % 3}", {"i": i, **data}, 1_700_000_000_000 + i)


# Children run the library in separate processes, so they share nothing with the test but the
# server. Each prints "ready", waits for "go" on stdin (a barrier), does its work, prints JSON.
CHILD_PRELUDE = """
import json, os, sys, time
from agent_saga import Entry
from agent_saga._postgres.store import PostgresLogStore
url, schema, tag = sys.argv[1], sys.argv[2], sys.argv[3]
store = PostgresLogStore(url, schema=schema, owner_ttl=float(os.environ.get("TTL", "15")))
print("ready", store.owner_id, flush=True)
sys.stdin.readline()
"""


def start_children(code: str, url: str, schema: str, tags: list[str], **env: str) -> list[str]:
    """Run ``code`` in one child per tag, released together; returns their last stdout lines."""
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD_PRELUDE + code, url, schema, tag],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, **env},
        )
        for tag in tags
    ]
    for child in children:
        assert child.stdout is not None
        assert child.stdout.readline().startswith("ready")
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    outputs = []
    for child in children:
        out, _ = child.communicate(timeout=60)
        assert child.returncode == 0
        outputs.append(out.strip().splitlines()[-1])
    return outputs


# -- the module stays light, and says what is missing -------------------------------------------


def test_importing_the_modules_does_not_import_psycopg() -> None:
    probe = (
        "import sys, agent_saga, agent_saga._postgres.store, agent_saga._gate.killswitch_pg\n"
        "print('psycopg' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_missing_psycopg_is_a_configuration_error() -> None:
    probe = (
        "import sys\n"
        "class NoPsycopg:  # an environment where psycopg is not installed\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'psycopg' or name.startswith('psycopg.'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, NoPsycopg())\n"
        "from agent_saga import ConfigurationError\n"
        "from agent_saga._postgres.store import PostgresLogStore\n"
        "from agent_saga._gate.killswitch_pg import PostgresKillSwitch\n"
        "for make in (PostgresLogStore, PostgresKillSwitch):\n"
        "    try:\n"
        "        make('postgresql://127.0.0.1/x')\n"
        "    except ConfigurationError as exc:\n"
        "        print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 2
    assert all("agent-saga[postgres]" in line for line in lines)


def test_schema_names_are_plain_identifiers(pg_url: str) -> None:
    with pytest.raises(ConfigurationError):
        PostgresLogStore(pg_url, schema='x"; DROP TABLE y; --')


# -- the log ------------------------------------------------------------------------------


def test_round_trip_is_byte_exact_with_the_file_store(
    pg_url: str, schema: str, store: PostgresLogStore, tmp_path: Path
) -> None:
    entries = [
        entry(1, text="Zürich → 東京", nested={"b": [1, 2.5, None], "a": True}),
        entry(2),
        Entry("test.control", None, {}, 5),
    ]
    written = store.append(entries[:2], sync=True)
    written += store.append(entries[2:], sync=False)
    store.sync()
    assert [r.seq for r in written] == [1, 2, 3]
    assert list(store.records()) == written
    report = store.verify()
    assert (report.ok, report.records, report.last_hash) == (True, 3, written[-1].hash)

    with FileLogStore(tmp_path / "file-home") as files:
        assert files.append(entries, sync=True) == written
    file_lines = (tmp_path / "file-home" / "log.jsonl").read_bytes().splitlines()
    rows = sql_exec(pg_url, "SELECT line FROM {s}.records ORDER BY seq", schema)
    assert [bytes(row[0]) for row in rows] == file_lines


def test_seq_continues_across_reopen(pg_url: str, schema: str) -> None:
    with PostgresLogStore(pg_url, schema=schema) as first:
        before = first.append([entry(1), entry(2)], sync=True)
    with PostgresLogStore(pg_url, schema=schema) as second:
        after = second.append([entry(3)], sync=True)
        assert after[0].seq == 3
        assert after[0].prev == before[-1].hash
        assert second.verify().records == 3


def test_two_stores_in_threads_keep_one_chain(pg_url: str, schema: str) -> None:
    stores = [PostgresLogStore(pg_url, schema=schema) for _ in range(2)]
    seqs: list[int] = []
    lock = threading.Lock()

    def write(store: PostgresLogStore, tag: int) -> None:
        for i in range(40):
            batch = [entry(i, w=tag)] if i % 4 else [entry(i, w=tag), entry(i, w=tag, second=1)]
            out = store.append(batch, sync=i % 2 == 0)
            with lock:
                seqs.extend(r.seq for r in out)
        store.sync()

    threads = [
        threading.Thread(target=write, args=(stores[n % 2], n))
        for n in range(4)  # two threads per store
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    report = stores[0].verify()
    for opened in stores:
        opened.close()
    assert sorted(seqs) == list(range(1, len(seqs) + 1)) == list(range(1, 4 * 50 + 1))
    assert report.ok
    assert report.records == 200


def test_processes_appending_at_once_keep_one_chain(pg_url: str, schema: str) -> None:
    code = """
seqs = []
for i in range(25):
    batch = [Entry("test.step", tag, {"w": tag, "i": i, "j": j}, i) for j in range(1 + i % 3)]
    seqs += [r.seq for r in store.append(batch, sync=i % 5 != 4)]
store.close()
print(json.dumps(seqs))
"""
    outputs = start_children(code, pg_url, schema, ["a", "b", "c"])
    per_child = [json.loads(line) for line in outputs]
    every = sorted(seq for seqs in per_child for seq in seqs)
    assert every == list(range(1, len(every) + 1))
    assert len(every) == 3 * sum(1 + i % 3 for i in range(25))
    with PostgresLogStore(pg_url, schema=schema) as reader:
        report = reader.verify()
        records = list(reader.records())
    assert report.ok
    assert report.records == len(every)
    tags = {(r.data["w"], r.data["i"], r.data["j"]) for r in records}
    assert len(tags) == len(records)  # nothing written twice
    for child, seqs in zip("abc", per_child, strict=True):
        assert [r.seq for r in records if r.data["w"] == child] == seqs


def test_updating_a_row_is_found_with_its_seq(
    pg_url: str, schema: str, store: PostgresLogStore
) -> None:
    store.append([entry(i, n=i) for i in range(1, 6)], sync=True)
    sql_exec(
        pg_url,
        "UPDATE {s}.records SET line = convert_to(replace(convert_from(line, 'UTF8'),"
        " '\"n\":3', '\"n\":4'), 'UTF8') WHERE seq = 3",
        schema,
    )
    report = store.verify()
    assert not report.ok
    assert report.records == 2
    assert report.error is not None
    assert (report.error.seq, report.error.offset) == (3, 2)
    assert "hash does not match" in report.error.reason
    with pytest.raises(CorruptLogError) as info:
        list(store.records())
    assert info.value.seq == 3


def test_a_deleted_row_or_a_changed_hash_column_is_found(
    pg_url: str, schema: str, store: PostgresLogStore
) -> None:
    store.append([entry(i) for i in range(1, 5)], sync=True)
    sql_exec(pg_url, "UPDATE {s}.records SET hash = repeat('0', 64) WHERE seq = 2", schema)
    error = store.verify().error
    assert error is not None
    assert (error.seq, error.reason) == (2, "hash column does not match the record")
    sql_exec(pg_url, "DELETE FROM {s}.records WHERE seq = 2", schema)
    error = store.verify().error
    assert error is not None
    assert error.seq == 2
    assert "missing" in error.reason


def test_sync_refuses_when_an_unflushed_record_is_gone(
    pg_url: str, schema: str, store: PostgresLogStore
) -> None:
    # What a server crash before the WAL flush would leave: the commit acknowledged without
    # sync is not there when the flush comes.
    store.append([entry(1)], sync=False)
    sql_exec(pg_url, "DELETE FROM {s}.records WHERE seq = 1", schema)
    with pytest.raises(StoreFailedError, match="no longer stored"):
        store.sync()
    with pytest.raises(StoreFailedError):
        store.append([entry(2)], sync=True)
    assert store.health()[0].startswith("log store failed")


def test_facts_and_health_come_from_the_server(
    pg_url: str, schema: str, store: PostgresLogStore
) -> None:
    with psycopg.connect(pg_url) as conn:
        version, fsync = conn.execute(
            "SELECT current_setting('server_version'), current_setting('fsync')"
        ).fetchone() or ("", "")
    facts = store.describe()
    assert facts["kind"] == "postgres"
    assert facts["server_version"] == version
    assert facts["fsync"] == fsync
    assert facts["flush_synchronous_commit"] == "on"
    assert facts["durable"] is (fsync == "on")
    crash_model = facts["crash_model"]
    assert isinstance(crash_model, dict)
    assert set(crash_model) == {"process_crash", "power_loss", "disk_loss"}
    assert crash_model["power_loss"].startswith("Every record" if fsync == "on" else "No record")
    password = conninfo_to_dict(pg_url).get("password")
    assert not password or f":{password}@" not in str(facts)
    if fsync == "on":
        assert store.health() == []
    else:
        assert any("fsync=off" in problem for problem in store.health())


def test_a_stopped_server_is_reported_and_refused_never_raised() -> None:
    bindir = find_bindir()
    if bindir is None:
        pytest.skip("needs PostgreSQL binaries to start and stop a server of its own")
    cluster = ThrowawayCluster(bindir)
    url = cluster.start()
    try:
        store = PostgresLogStore(url, schema="fleet", connect_timeout=2)
        switch = PostgresKillSwitch(url, schema="fleet", timeout=2)
        store.append([entry(1)], sync=True)
        assert (store.health(), switch.state().halted) == ([], False)
    finally:
        cluster.stop()
    problems = store.health()
    assert len(problems) == 1
    assert problems[0].startswith("PostgreSQL server cannot be read")
    facts = store.describe()
    assert facts["durable"] is False
    assert str(facts["crash_model"]).count("No record is sure to survive") == 1
    assert not store.verify().ok
    assert store.owner_alive("someone-else")  # nothing is proven gone
    with pytest.raises(StoreFailedError):
        store.append([entry(2)], sync=True)
    state = switch.state()
    assert (state.halted, state.readable) == (True, False)
    store.close()
    switch.close()


def test_a_dropped_connection_is_replaced_before_an_append(
    pg_url: str, schema: str, store: PostgresLogStore
) -> None:
    store.append([entry(1)], sync=True)
    terminated = sql_exec(
        pg_url,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE application_name = 'agent-saga' AND pid <> pg_backend_pid()"
        " AND usename = current_user AND strpos(query, %s) > 0",  # this test's sessions only
        schema,
        schema,
    )
    assert terminated  # the store's session that appended record 1
    assert store.append([entry(2)], sync=True)[0].seq == 2
    assert store.health() == []
    assert store.verify().records == 2


# -- owners ---------------------------------------------------------------------------------


def test_owner_alive_while_open_and_gone_after_close(pg_url: str, schema: str) -> None:
    with PostgresLogStore(pg_url, schema=schema) as watcher:
        other = PostgresLogStore(pg_url, schema=schema)
        assert watcher.owner_alive(watcher.owner_id)
        assert watcher.owner_alive(other.owner_id)
        assert not watcher.owner_alive("never-opened")
        other.close()
        assert not watcher.owner_alive(other.owner_id)
        assert not other.owner_alive(other.owner_id)


def test_owner_of_a_killed_process_is_gone_after_its_ttl(pg_url: str, schema: str) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD_PRELUDE, pg_url, schema, "x"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "TTL": "1.0"},
    )
    assert child.stdout is not None
    owner = child.stdout.readline().split()[1]
    with PostgresLogStore(pg_url, schema=schema) as watcher:
        time.sleep(1.2)  # past one ttl: only the child's heartbeat keeps it alive
        assert watcher.owner_alive(owner)
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=10)
        assert watcher.owner_alive(owner)  # not provably gone yet
        time.sleep(1.2)
        assert not watcher.owner_alive(owner)


def test_an_expired_owner_is_fenced_off(pg_url: str, schema: str) -> None:
    with PostgresLogStore(pg_url, schema=schema) as watcher:
        stale = PostgresLogStore(pg_url, schema=schema)
        sql_exec(
            pg_url,
            "UPDATE {s}.owners SET expires_at = clock_timestamp() - interval '1 second'"
            " WHERE owner_id = %s",
            schema,
            stale.owner_id,
        )
        assert not watcher.owner_alive(stale.owner_id)
        with pytest.raises(StoreFailedError, match="expired"):
            stale.append([entry(1)], sync=True)
        assert any("expired" in problem for problem in stale.health())
        assert not stale.owner_alive(stale.owner_id)
        stale.close()
        assert watcher.verify().records == 0


# -- leases -------------------------------------------------------------------------------


def test_lease_is_exclusive_until_released(store: PostgresLogStore, pg_url: str) -> None:
    with PostgresLogStore(pg_url, schema=store.schema) as other:
        lease = store.lease("recover:saga-1", ttl=30)
        assert lease is not None
        assert lease.name == "recover:saga-1"
        assert store.lease("recover:saga-1", ttl=30) is None
        assert other.lease("recover:saga-1", ttl=30) is None
        lease.release()
        lease.release()  # idempotent
        again = other.lease("recover:saga-1", ttl=30)
        assert again is not None
        other.close()  # closing the holder frees its leases
        assert store.lease("recover:saga-1", ttl=30) is not None
    with pytest.raises(ValueError, match="ttl"):
        store.lease("x", ttl=0)


def test_racing_processes_win_each_lease_exactly_once(pg_url: str, schema: str) -> None:
    code = """
won = [n for n in range(40) if store.lease(f"job-{n}", ttl=30) is not None]
print(json.dumps(won), flush=True)
os._exit(0)  # die holding the leases
"""
    outputs = start_children(code, pg_url, schema, ["a", "b"])
    first, second = (set(json.loads(line)) for line in outputs)
    assert first | second == set(range(40))
    assert not first & second
    with PostgresLogStore(pg_url, schema=schema) as late:
        assert all(late.lease(f"job-{n}", ttl=30) is None for n in range(40))


def test_lease_of_a_dead_holder_expires_after_its_ttl(pg_url: str, schema: str) -> None:
    code = """
assert store.lease("recover:saga-9", ttl=1.0) is not None
print("held", flush=True)
os._exit(0)
"""
    assert start_children(code, pg_url, schema, ["a"]) == ["held"]
    with PostgresLogStore(pg_url, schema=schema) as heir:
        assert heir.lease("recover:saga-9", ttl=5) is None
        deadline = time.monotonic() + 5
        lease = None
        while lease is None and time.monotonic() < deadline:
            time.sleep(0.2)
            lease = heir.lease("recover:saga-9", ttl=5)
        assert lease is not None


# -- the kill switch ------------------------------------------------------------------------


def test_kill_switch_is_shared_between_connections(pg_url: str, schema: str) -> None:
    with (
        PostgresKillSwitch(pg_url, schema=schema) as a,
        PostgresKillSwitch(pg_url, schema=schema) as b,
    ):
        assert not a.state().halted
        a.halt("bad deploy", at=1234.5)
        seen = b.state()
        assert (seen.halted, seen.reason, seen.since, seen.readable) == (
            True,
            "bad deploy",
            1234.5,
            True,
        )
        b.resume()
        b.resume()  # idempotent
        assert not a.state().halted
        assert a.describe()["fail_closed"] is True
        password = conninfo_to_dict(pg_url).get("password")
        assert not password or f":{password}@" not in str(a.describe())


def test_kill_switch_reconnects_after_its_connection_dropped(pg_url: str, schema: str) -> None:
    with PostgresKillSwitch(pg_url, schema=schema) as switch:
        switch.halt("hold", at=1.0)
        sql_exec(
            pg_url,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = 'agent-saga' AND pid <> pg_backend_pid()"
            " AND usename = current_user AND strpos(query, %s) > 0",  # this test's sessions
            schema,
            schema,
        )
        state = switch.state()
        assert (state.halted, state.reason, state.readable) == (True, "hold", True)


@pytest.mark.parametrize(
    "url", ["postgresql://nobody@127.0.0.1:1/none", "this is not a connection string"]
)
def test_kill_switch_fails_closed_when_unreadable(url: str) -> None:
    with PostgresKillSwitch(url, timeout=2) as switch:
        state = switch.state()
        assert state.halted
        assert not state.readable
        assert state.reason.startswith("kill switch unreadable")
        with pytest.raises(ConnectionError):
            switch.halt("x", at=0.0)


# -- the kit on PostgreSQL --------------------------------------------------------------------


def test_kit_rolls_back_and_halts_on_postgres(pg_url: str, schema: str, tmp_path: Path) -> None:
    ledger = Ledger()
    store = PostgresLogStore(pg_url, schema=schema)
    switch = PostgresKillSwitch.beside(store)
    kit = AgentKit(
        store=store,
        kill_switch=switch,
        home=tmp_path,
        ids=SequentialIds(),
    )

    @kit.compensator(f"tests.pg.refund.{id(ledger)}")
    def refund(result: dict[str, str], idempotency_key: str) -> None:
        ledger.record("refund", result["charge_id"])

    @kit.tool(name="payments.charge", compensate=f"tests.pg.refund.{id(ledger)}")
    def charge(amount: int, idempotency_key: str = "") -> dict[str, str]:
        ledger.record("charge", idempotency_key)
        return {"charge_id": idempotency_key}

    with kit:
        with pytest.raises(SagaRolledBack) as info, kit.transaction("pay"):
            charge(250)
            raise TimeoutError("email service timed out")
        assert info.value.report.status is SagaStatus.ROLLED_BACK
        assert (ledger.count("charge"), ledger.count("refund")) == (1, 1)
        kinds = [r.kind for r in kit.store.records()]
        assert kinds[0] == Kind.SAGA_BEGIN
        assert Kind.COMP_DONE in kinds
        assert kinds[-1] == Kind.SAGA_END
        assert kit.verify().ok
        assert kit.guarantees()  # the manifest is computed from the PostgreSQL store

        with PostgresKillSwitch(pg_url, schema=schema) as operator:
            operator.halt("incident 42", at=time.time())
            with pytest.raises(HaltedError), kit.transaction("blocked"):
                charge(1)
            assert not kit.status().ready
            operator.resume()
        with kit.transaction("after"):
            charge(2)
        assert ledger.count("charge") == 2
        assert kit.status().ready
    switch.close()
