"""The async sink adapter: a restart resumes the chain; damage is detected; recovery works."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from agent_saga import AgentKit, CorruptLogError, Entry, SagaRolledBack
from agent_saga._log.sink import AsyncSink, MemorySink, SinkLogStore, SqliteSink


def entry(n: int) -> Entry:
    return Entry("t", "s", {"n": n}, n)


@pytest.fixture(params=["memory", "sqlite"])
def sink_factory(request: pytest.FixtureRequest, tmp_path: Path):  # type: ignore[no-untyped-def]
    if request.param == "memory":
        shared = MemorySink()
        return lambda: shared
    return lambda: SqliteSink(tmp_path / "log.sqlite")


def test_restart_resumes_seq_and_chain(sink_factory) -> None:  # type: ignore[no-untyped-def]
    with SinkLogStore(sink_factory()) as store:
        store.append([entry(1), entry(2)], sync=True)
    with SinkLogStore(sink_factory()) as store:  # a restart is not tampering
        (third,) = store.append([entry(3)], sync=True)
        assert third.seq == 3
        report = store.verify()
        assert report.ok
        assert report.records == 3
        assert [r.data["n"] for r in store.records()] == [1, 2, 3]


def test_tampered_sqlite_sink_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "log.sqlite"
    with SinkLogStore(SqliteSink(path)) as store:
        store.append([entry(i) for i in range(4)], sync=True)
    db = sqlite3.connect(path)
    db.execute("UPDATE records SET line = replace(line, '\"n\":2', '\"n\":7') WHERE pos = 2")
    db.commit()
    db.close()
    with pytest.raises(CorruptLogError) as info:
        SinkLogStore(SqliteSink(path))
    assert info.value.seq == 3


def test_sinks_satisfy_the_protocol(tmp_path: Path) -> None:
    assert isinstance(MemorySink(), AsyncSink)
    assert isinstance(SqliteSink(tmp_path / "x.sqlite"), AsyncSink)


def test_kit_on_a_sink_rolls_back_and_survives_restart(tmp_path: Path) -> None:
    sink = SqliteSink(tmp_path / "edge.sqlite")
    undone: list[int] = []

    def back(result: int) -> None:
        undone.append(result)

    with AgentKit(home=tmp_path / "home", store=SinkLogStore(sink)) as kit:

        @kit.tool(name="edge.move", compensate=back)
        def move(n: int) -> int:
            return n

        async def job() -> None:
            async with kit.transaction("edge"):
                move(1)
                move(2)
                raise RuntimeError("sensor fault")

        with pytest.raises(SagaRolledBack):
            asyncio.run(job())
    assert undone == [2, 1]
    with SinkLogStore(SqliteSink(tmp_path / "edge.sqlite")) as reopened:
        kinds = [r.kind for r in reopened.records()]
        assert kinds[-1] == "saga.end"
        assert reopened.describe()["durable"] is True


def test_single_writer_sink_recovers_an_earlier_run(tmp_path: Path) -> None:
    sink = MemorySink()
    undone: list[int] = []
    kit = AgentKit(home=tmp_path / "home", store=SinkLogStore(sink))

    @kit.compensator("edge.undo")
    def undo(result: int) -> None:
        undone.append(result)

    @kit.tool(name="edge.step", compensate="edge.undo")
    def step(n: int) -> int:
        return n

    tx = kit.transaction("crashed")
    tx.__enter__()
    step(5)
    kit.close()  # the process "dies": the saga is never finished
    from agent_saga._engine.saga import _CURRENT

    _CURRENT.set(None)
    with AgentKit(home=tmp_path / "home", store=SinkLogStore(sink)) as restarted:
        report = restarted.recover()
    assert [s.status.value for s in report.recovered] == ["rolled_back"]
    assert undone == [5]
