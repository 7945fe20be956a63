"""``known_tools``: the tool names the designer checks a flow against, one row a name, kept by
ingest beside ``saga_tools`` and filled once from it in a database made before it existed;
on SQLite and on a real PostgreSQL server."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest
from agent_saga.testing.postgres import scratch_schema, server_for_tests
from agent_saga_server.dashboard.designer import known_tools
from agent_saga_server.store.db import Database, PostgresDatabase, SqliteDatabase

Opener = Callable[[], Database]


@contextmanager
def _sqlite(tmp_path: Path) -> Iterator[Opener]:
    yield lambda: SqliteDatabase(tmp_path / "plane.sqlite3")


@contextmanager
def _postgres(tmp_path: Path) -> Iterator[Opener]:
    with server_for_tests() as url, scratch_schema(url) as schema:
        yield lambda: PostgresDatabase(url, schema=schema)


@pytest.mark.parametrize("database", [_sqlite, _postgres], ids=["sqlite", "postgres"])
def test_known_tools_are_kept_and_filled_once_from_older_databases(
    database: Callable[[Path], AbstractContextManager[Opener]], tmp_path: Path
) -> None:
    with database(tmp_path) as opened:
        db = opened()
        try:
            assert known_tools(db) == frozenset()
            with db.transaction() as tx:  # as a database made before known_tools held them
                rows = [("o1", "s1", "pay.charge"), ("o1", "s2", "pay.charge")]
                rows.append(("o2", "s3", "stock.reserve"))
                tx.execute_many(
                    "INSERT INTO saga_tools (origin, saga, tool) VALUES (?, ?, ?)", rows
                )
                tx.execute("DROP TABLE known_tools")
        finally:
            db.close()
        db = opened()  # opening creates the table and fills it from saga_tools
        try:
            assert known_tools(db) == {"pay.charge", "stock.reserve"}
            with db.transaction() as tx:
                tx.execute("INSERT INTO saga_tools (origin, saga, tool) VALUES (?, ?, ?)",
                           ("o3", "s4", "not.through.ingest"))  # fmt: skip
        finally:
            db.close()
        db = opened()  # the table is not empty: not filled again
        try:
            assert known_tools(db) == {"pay.charge", "stock.reserve"}
        finally:
            db.close()
