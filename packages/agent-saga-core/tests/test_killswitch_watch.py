"""The fleet's kill switch watched over LISTEN/NOTIFY: a halt reaches every process at once.

Two switches on one schema stand for two hosts; one halts, the other must see it from memory
(its watch), well within the fleet's 1 s bound, and fall back to reading the row when its watch
is not fresh.
"""

from __future__ import annotations

import time

import psycopg
from agent_saga._gate.killswitch_pg import PostgresKillSwitch
from agent_saga._gate.killswitch_watch import FRESH


def _until(check: object, seconds: float) -> float:
    """Poll ``check()`` until true; returns the seconds it took (fails after ``seconds``)."""
    started = time.monotonic()
    while not check():  # type: ignore[operator]
        assert time.monotonic() - started < seconds, "timed out"
        time.sleep(0.002)
    return time.monotonic() - started


def test_a_halt_is_seen_from_memory_within_milliseconds(pg_url: str, schema: str) -> None:
    with (
        PostgresKillSwitch(pg_url, schema=schema) as here,
        PostgresKillSwitch(pg_url, schema=schema, watch=True) as there,
    ):
        assert not there.state().halted
        _until(lambda: there._watch is not None and there._watch.current() is not None, 10)
        here.halt("stop the fleet", at=1.5)
        seen = _until(lambda: there._watch.current().halted, 2)  # type: ignore[union-attr]
        assert seen < 0.5
        state = there.state()
        assert (state.halted, state.reason, state.since) == (True, "stop the fleet", 1.5)
        here.resume()
        _until(lambda: not there.state().halted, 2)
        assert there.describe()["watched"]


def test_a_watch_that_lost_its_connection_is_not_trusted(pg_url: str, schema: str) -> None:
    with (
        PostgresKillSwitch(pg_url, schema=schema) as here,
        PostgresKillSwitch(pg_url, schema=schema, watch=True) as there,
    ):
        assert not there.state().halted
        _until(lambda: there._watch is not None and there._watch.current() is not None, 10)
        watching = there._watch._conn  # type: ignore[union-attr]
        assert watching is not None
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (watching.info.backend_pid,))
        here.halt("while the watch reconnects", at=2.0)
        # Whatever the watch knows, the switch answers halted within the freshness bound.
        assert _until(lambda: there.state().halted, FRESH + 2) <= FRESH + 0.5


def test_a_closed_watching_switch_reads_as_halted(pg_url: str, schema: str) -> None:
    switch = PostgresKillSwitch(pg_url, schema=schema, watch=True)
    assert not switch.state().halted
    switch.close()
    state = switch.state()
    assert state.halted
    assert not state.readable
