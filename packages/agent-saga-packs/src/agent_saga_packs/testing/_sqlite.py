"""One short SQLite transaction per operation, so any process sharing the file sees each effect
the moment the call returns (a killed process leaves every effect it made, and none half made)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path


@contextmanager
def transaction(path: Path) -> Iterator[sqlite3.Connection]:
    """A connection in an immediate (write-locked) transaction, committed when the block ends
    without an exception and rolled back otherwise."""
    with closing(sqlite3.connect(path, timeout=30, isolation_level=None)) as db:
        db.row_factory = sqlite3.Row
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")


def create_tables(path: Path, schema: str) -> None:
    """Create the tables of ``schema`` (``CREATE TABLE IF NOT EXISTS ...``) in ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with closing(sqlite3.connect(path, timeout=30)) as db:
        db.executescript(schema)
