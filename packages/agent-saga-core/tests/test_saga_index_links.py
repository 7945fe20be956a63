"""A process that can write a home but not another user's files plants symbolic links where
the saga index lives; whoever reads the home next (an auditor's ``agent-saga sagas`` or
``certify --since``) must not write through them."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
from agent_saga import Entry, FileLogStore
from agent_saga._log.sagaindex import INDEX_DIR, INDEX_NAME
from agent_saga.cli import main
from click.testing import CliRunner


def victim(path: Path) -> Path:
    """Another user's SQLite database, whose ``meta`` table has the index's shape."""
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE meta (k TEXT PRIMARY KEY, v TEXT NOT NULL)")
        db.execute("INSERT INTO meta VALUES ('precious', 'data')")
    return path


def home_with_a_saga(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    with FileLogStore(home) as store:
        store.append([Entry("saga.begin", "s1", {"name": "x", "owner": "o"}, 1)], sync=True)
    return home


@pytest.mark.parametrize("linked", ["file", "wal", "directory"])
def test_a_reader_never_writes_through_a_link_planted_in_the_index(
    tmp_path: Path, linked: str
) -> None:
    home = home_with_a_saga(tmp_path)
    index = home / INDEX_DIR
    index.mkdir(exist_ok=True)
    for name in os.listdir(index):
        os.unlink(index / name)
    target = tmp_path / "elsewhere"
    target.mkdir()
    db = victim(target / INDEX_NAME)
    before = db.read_bytes()
    if linked == "file":
        os.symlink(db, index / INDEX_NAME)
    elif linked == "wal":
        os.symlink(db, index / f"{INDEX_NAME}-wal")
    else:
        index.rmdir()
        os.symlink(target, index)
    result = CliRunner().invoke(main, ["--home", str(home), "sagas"])
    assert result.exit_code == 0, result.output
    assert "s1" in result.output
    certified = CliRunner().invoke(main, ["--home", str(home), "certify", "--since", "0"])
    assert "range: records 1 to 1 (1) after record 0" in certified.output
    assert db.read_bytes() == before
    assert sorted(os.listdir(target)) == [INDEX_NAME]
    assert not index.is_symlink()
    assert not (index / INDEX_NAME).is_symlink()
