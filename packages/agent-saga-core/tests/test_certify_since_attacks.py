"""Attacks on ``certify --since``: a process that can write the home's files but holds no key
edits the saga index or the records before the resume point; a careless user names a range
beyond the log. Each must end NOT CERTIFIED, or the certificate must say what it did not check."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

from agent_saga import AgentKit, Entry, FileLogStore
from agent_saga._log.sagaindex import INDEX_DIR, INDEX_NAME
from agent_saga._log.segments import segment
from agent_saga.cli import main
from click.testing import CliRunner, Result


def cli(home: Path, *args: str) -> Result:
    return CliRunner().invoke(main, ["--home", str(home), *args])


def sagas(home: Path, names: list[str], *, ended: bool = True) -> None:
    """A saga per name: its begin (owner gone) and, when ``ended``, its end (committed)."""
    with FileLogStore(home, segment_records=40) as store:
        for n, sid in enumerate(names):
            store.append([Entry("saga.begin", sid, {"name": "x", "owner": "gone"}, n)], sync=False)
            if ended:
                store.append([Entry("saga.end", sid, {"status": "committed"}, n)], sync=False)
        assert store.saga_index is not None
        store.saga_index.refresh()


def index(home: Path) -> sqlite3.Connection:
    return sqlite3.connect(home / INDEX_DIR / INDEX_NAME)


def hide_saga(home: Path, saga_id: str) -> None:
    """Edit the saga index as a hostile writer would: every trace of ``saga_id`` is gone."""
    with index(home) as db:
        db.execute("DELETE FROM records WHERE saga = ?", (saga_id,))
        db.execute("DELETE FROM sagas WHERE id = ?", (saga_id,))


def checkpointed(home: Path) -> None:
    """A checkpoint of the log so far, confirmed by a verify (a resume point at its size)."""
    assert cli(home, "checkpoint").exit_code == 0
    assert cli(home, "verify").exit_code == 0


def test_a_saga_of_the_range_hidden_by_the_index_is_still_checked(tmp_path: Path) -> None:
    home = tmp_path / "home"
    sagas(home, [f"a-{n}" for n in range(10)])
    checkpointed(home)
    sagas(home, ["a-10"])
    sagas(home, ["crashed"], ended=False)  # in the range, owner gone, never ended
    sagas(home, ["a-11"])
    hide_saga(home, "crashed")
    result = cli(home, "certify", "--since", "latest")
    assert result.exit_code == 1, result.output
    assert "CRITICAL saga crashed: saga 'x' crashed and was never recovered" in result.output
    assert "NOT CERTIFIED: 3 sagas, 5 records" in result.output


def test_a_saga_whose_end_in_the_range_the_index_hides_is_read_whole(tmp_path: Path) -> None:
    home = tmp_path / "home"
    sagas(home, ["long"], ended=False)
    checkpointed(home)
    with FileLogStore(home) as store:
        store.append([Entry("saga.end", "long", {"status": "committed"}, 9)], sync=True)
        assert store.saga_index is not None
        store.saga_index.refresh()
    with index(home) as db:  # the end is cut off: the saga looks crashed
        db.execute("DELETE FROM records WHERE seq = 2")
        db.execute("UPDATE sagas SET n = 1, last_seq = 1, end_status = NULL")
    result = cli(home, "certify", "--since", "latest")
    assert result.exit_code == 0, result.output
    assert "certified: 1 sagas, 1 records, 0 critical" in result.output


def forge_record(home: Path, seq: int, old: bytes, new: bytes) -> None:
    """Rewrite record ``seq`` of an unkeyed log (``old`` -> ``new``, same length), with the hash
    it then has, in the log and in the saga index: a forgery that needs no key."""
    with index(home) as db:
        seg, off, length = db.execute(
            "SELECT seg, off, len FROM records WHERE seq = ?", (seq,)
        ).fetchone()
    path = Path(segment(home, seg).path)
    raw = path.read_bytes()
    line = raw[off : off + length]
    obj = json.loads(line)
    body = line.replace(old, new)
    assert body != line
    assert len(body) == len(line)
    hashed = {k: v for k, v in json.loads(body).items() if k not in ("hash", "salts")}
    hashed_bytes = json.dumps(hashed, sort_keys=True, separators=(",", ":")).encode()
    digest = hashlib.sha256(bytes.fromhex(obj["prev"]) + hashed_bytes).hexdigest()
    body = body.replace(obj["hash"].encode(), digest.encode())
    path.write_bytes(raw[:off] + body + raw[off + length :])
    with index(home) as db:
        db.execute("UPDATE records SET hash = ? WHERE seq = ?", (bytes.fromhex(digest), seq))


def test_records_before_the_resume_point_an_unkeyed_log_cannot_vouch_for_are_named(
    tmp_path: Path,
) -> None:
    """A saga of the range began before the resume point; its begin is rewritten (the log has
    no chain key, so anyone can hash it again) and the index made to agree. certify --since
    cannot tell; it must say that it took that record on the index's word."""
    home = tmp_path / "home"
    sagas(home, ["long"], ended=False)
    sagas(home, [f"a-{n}" for n in range(5)])
    with AgentKit(home=home) as kit:  # a kit's checkpoint signs the unfinished sagas
        kit.checkpoint()
    assert cli(home, "verify").exit_code == 0
    with FileLogStore(home) as store:
        store.append([Entry("saga.end", "long", {"status": "committed"}, 9)], sync=True)
        assert store.saga_index is not None
        store.saga_index.refresh()
    forge_record(home, 1, b'"name":"x"', b'"name":"y"')
    assert cli(home, "certify").exit_code == 1  # a full certify finds the forgery
    result = cli(home, "certify", "--since", "latest")
    assert "WARNING: 1 record(s) of the sagas checked lie before record 12" in result.output
    assert "certified: 1 sagas, 1 records, 0 critical, 1 warnings" in result.output


def test_a_record_count_beyond_the_log_is_not_certified(tmp_path: Path) -> None:
    home = tmp_path / "home"
    sagas(home, [f"a-{n}" for n in range(5)])
    result = cli(home, "certify", "--since", "99999")
    assert result.exit_code == 1, result.output
    assert "CRITICAL: --since 99999: the log has 10 records" in result.output
    assert cli(home, "certify", "--since", "10").exit_code == 0


def test_an_unfinished_saga_before_the_range_hidden_by_the_index_is_still_reported(
    tmp_path: Path,
) -> None:
    """The index's unfinished sagas are checked against the log (here the checkpoint signs no
    statement of them, so against the whole log): a crashed saga it leaves out is found."""
    home = tmp_path / "home"
    sagas(home, ["early"])
    sagas(home, ["crashed"], ended=False)  # before the range, owner gone, never ended
    sagas(home, ["late"])
    checkpointed(home)
    sagas(home, ["after"])
    hide_saga(home, "crashed")
    result = cli(home, "certify", "--since", "latest")
    assert result.exit_code == 1, result.output
    assert "CRITICAL saga crashed: saga 'x' crashed and was never recovered" in result.output
