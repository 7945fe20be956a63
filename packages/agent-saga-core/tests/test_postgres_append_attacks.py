"""The one-statement PostgreSQL append interrupted while it waits for the log's lock (held here
by another session): its server connection killed with ``pg_terminate_backend``, or Ctrl-C in
the client. The batch is settled exactly once or the store fails saying why in one line; no
lock or open transaction is left behind, and the chain stays whole."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg
import pytest
from agent_saga import Entry, StoreFailedError
from agent_saga._log.records import Record
from agent_saga._postgres.connection import lock_key
from agent_saga._postgres.store import PostgresLogStore
from psycopg import sql

WAITING = (
    "SELECT pid FROM pg_stat_activity WHERE application_name = 'agent-saga'"
    " AND wait_event_type = 'Lock' AND position(%s in query) > 0"
)


@contextmanager
def log_lock_held(url: str, schema: str) -> Iterator[Callable[[], None]]:
    """The log's append lock held by another session until the function yielded is called."""
    holder = psycopg.connect(url)
    try:
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key(schema, "append"),))
        yield holder.rollback
    finally:
        holder.close()


def waiting_backend(url: str, schema: str) -> int:
    """The pid of the store's backend once it waits for the log's lock."""
    deadline = time.monotonic() + 10
    with psycopg.connect(url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(WAITING, (schema,)).fetchone()
            if row is not None:
                return int(row[0])
            time.sleep(0.02)
    raise AssertionError("the batch never waited for the log's lock")


def second_append_in_a_thread(store: PostgresLogStore) -> tuple[threading.Thread, list[Record]]:
    """A thread appending the record ``n=1`` (started); the list its records go to."""
    ended: list[Record] = []
    thread = threading.Thread(
        target=lambda: ended.extend(store.append([Entry("t.step", "x", {"n": 1}, 1)], sync=True))
    )
    thread.start()
    return thread, ended


def stored(url: str, schema: str) -> list[tuple[int, object]]:
    with PostgresLogStore(url, schema=schema) as reader:
        assert reader.verify().ok
        return [(r.seq, r.data.get("n")) for r in reader.records()]


@pytest.mark.parametrize("connections", [1, 2])
def test_a_batch_whose_backend_is_terminated_while_it_waits_is_written_once(
    pg_url: str, schema: str, connections: int
) -> None:
    with PostgresLogStore(pg_url, schema=schema, connections=connections) as store:
        store.append([Entry("t.step", "x", {"n": 0}, 1)], sync=True)
        with log_lock_held(pg_url, schema) as release:
            appending, ended = second_append_in_a_thread(store)
            with psycopg.connect(pg_url, autocommit=True) as admin:
                pid = waiting_backend(pg_url, schema)
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            time.sleep(0.1)
            release()
            appending.join(15)
        assert [r.seq for r in ended] == [2]
        assert [r.seq for r in store.append([Entry("t.step", "x", {"n": 2}, 1)], sync=True)] == [3]
    assert stored(pg_url, schema) == [(1, 0), (2, 1), (3, 2)]


@pytest.mark.parametrize("connections", [1, 2])
def test_ctrl_c_while_a_batch_waits_for_the_lock_fails_the_store_in_one_clear_line(
    pg_url: str, schema: str, connections: int
) -> None:
    main = threading.get_ident()
    # Python raises KeyboardInterrupt on SIGINT only where it was not ignored when it started
    # (a shell's background job ignores it): this test stands for a Ctrl-C either way
    ignored = signal.signal(signal.SIGINT, signal.default_int_handler)
    store = PostgresLogStore(pg_url, schema=schema, connections=connections)
    try:
        store.append([Entry("t.step", "x", {"n": 0}, 1)], sync=True)
        with log_lock_held(pg_url, schema) as release:

            def interrupt_once_waiting() -> None:
                waiting_backend(pg_url, schema)
                signal.pthread_kill(main, signal.SIGINT)  # Ctrl-C, in the appending thread

            interrupt = threading.Thread(target=interrupt_once_waiting)
            interrupt.start()
            with pytest.raises(KeyboardInterrupt):
                store.append([Entry("t.step", "x", {"n": 1}, 1)], sync=True)
            interrupt.join(10)
            release()
        with pytest.raises(StoreFailedError) as failed:
            store.append([Entry("t.step", "x", {"n": 2}, 1)], sync=True)
        message = str(failed.value)
        assert "KeyboardInterrupt" in message, message
        assert "()" not in message
        assert "\n" not in message
        assert any("KeyboardInterrupt" in problem for problem in store.health())
        with PostgresLogStore(pg_url, schema=schema) as other:  # no lock left behind
            assert [r.seq for r in other.append([Entry("t.z", "y", {"n": 3}, 1)], sync=True)] == [2]
    finally:
        store.close()
        signal.signal(signal.SIGINT, ignored)
    assert stored(pg_url, schema) == [(1, 0), (2, 3)]


@pytest.mark.parametrize("connections", [1, 2])
def test_a_batch_waiting_longer_than_the_owner_ttl_for_the_lock_keeps_its_owner_alive(
    pg_url: str, schema: str, connections: int
) -> None:
    """Another process holds the log's lock longer than the ttl while a batch waits for it: the
    owner's heartbeats go on meanwhile (with one connection, on a connection of their own for
    that long wait), so the store neither expires nor fails."""
    with PostgresLogStore(pg_url, schema=schema, connections=connections, owner_ttl=1.5) as store:
        store.append([Entry("t.step", "x", {"n": 0}, 1)], sync=True)
        with log_lock_held(pg_url, schema) as release:
            appending, ended = second_append_in_a_thread(store)
            waiting_backend(pg_url, schema)
            time.sleep(2.4)
            with psycopg.connect(pg_url, autocommit=True) as conn:  # as another host sees it
                alive = conn.execute(
                    sql.SQL(
                        "SELECT expires_at > clock_timestamp() FROM {s}.owners WHERE owner_id = %s"
                    ).format(s=sql.Identifier(schema)),
                    (store.owner_id,),
                ).fetchone()
            assert alive == (True,)
            release()
            appending.join(15)
        assert [r.seq for r in ended] == [2]
        time.sleep(0.6)  # a heartbeat after the batch
        assert store.health() == []
        assert [r.seq for r in store.append([Entry("t.step", "x", {"n": 2}, 1)], sync=True)] == [3]
