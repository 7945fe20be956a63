"""``certify --since``: a certificate of the records after a checkpoint, read from the newest
verified checkpoint, that says what range it covers and still catches tampering in it."""

from __future__ import annotations

import json
import shutil
import tracemalloc
from pathlib import Path

import pytest
from agent_saga import Entry, FileLogStore
from agent_saga._log.source import FileLogSource
from agent_saga.cli import main
from agent_saga.proofs._certify import verify_certificate
from agent_saga.proofs._certify_since import certify_since
from agent_saga.proofs._signing import home_verifier
from click.testing import CliRunner, Result


def cli(home: Path, *args: str) -> Result:
    return CliRunner().invoke(main, ["--home", str(home), *args])


def fill(home: Path, start: int, count: int, *, ended: bool = True) -> None:
    """``count`` sagas of two records each (begin, end committed) in segments of 40."""
    with FileLogStore(home, segment_records=40) as store:
        for n in range(start, start + count):
            sid = f"s-{n:04d}"
            begin = Entry("saga.begin", sid, {"name": "x", "owner": "gone"}, n)
            store.append([begin], sync=False)
            if ended:
                store.append([Entry("saga.end", sid, {"status": "committed"}, n)], sync=n % 7 == 0)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """150 sagas (300 records), a checkpoint of them, verified once (a resume point at 300),
    the checkpoint saved as ``saved.note``; then 25 sagas more (records 301 to 350)."""
    home = tmp_path / "home"
    fill(home, 0, 150)
    assert cli(home, "checkpoint").exit_code == 0
    assert cli(home, "verify").exit_code == 0
    shutil.copy(home / "checkpoints" / "latest.note", tmp_path / "saved.note")
    fill(home, 150, 25)
    return home


def test_it_certifies_the_new_range_without_reading_what_was_verified(
    home: Path, tmp_path: Path
) -> None:
    # A sealed segment before the resume point is replaced by bytes of the same length: not
    # read again (verified before), so not found here; a full certify finds it.
    old = home / "segments" / f"{41:020d}.jsonl"
    old.write_bytes(old.read_bytes().replace(b'"s-0025"', b'"s-0026"'))
    out = tmp_path / "cert.json"
    result = cli(home, "certify", "--since", str(tmp_path / "saved.note"), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "range: records 301 to 350 (50) after the checkpoint of 300 records" in result.output
    assert "read from record 301 (the resume point of 300 records" in result.output
    assert "certified: 25 sagas, 50 records, 0 critical, 0 warnings" in result.output
    cert = json.loads(out.read_text())
    assert (cert["range"]["after"], cert["range"]["to"]) == (300, 350)
    assert cert["range"]["since"] == (tmp_path / "saved.note").read_text()
    verifier = home_verifier(home)
    assert verifier is not None
    assert verify_certificate(cert, [verifier])
    assert cli(home, "certify").exit_code == 1


def test_a_record_altered_in_the_range_is_caught(home: Path, tmp_path: Path) -> None:
    newest = sorted((home / "segments").glob("*.jsonl"))[-1]
    raw = newest.read_bytes()
    newest.write_bytes(
        raw.replace(b'"name":"x","owner":"gone"},"hash"', b'"name":"y","owner":"gone"},"hash"', 1)
    )
    assert newest.read_bytes() != raw
    result = cli(home, "certify", "--since", str(tmp_path / "saved.note"))
    assert result.exit_code == 1
    assert "CRITICAL: the hash chain is broken" in result.output
    assert "hash does not match" in result.output
    assert "NOT CERTIFIED" in result.output


def test_a_log_cut_below_the_checkpoint_named_is_caught(home: Path, tmp_path: Path) -> None:
    for path in (home / "checkpoints").rglob("*"):  # its trace: the home's own checkpoints
        if path.is_file() and path.suffix in (".json", ".note"):
            path.unlink()
    for path in (home / "segments").iterdir():  # records 281 on are gone
        if path.name[:20].isdigit() and int(path.name[:20]) >= 281:
            path.unlink()
    result = cli(home, "certify", "--since", str(tmp_path / "saved.note"))
    assert result.exit_code == 1
    assert "log truncated: 280 records, but a checkpoint covers 300" in result.output


def test_a_saga_left_unfinished_before_the_range_is_still_reported(tmp_path: Path) -> None:
    home = tmp_path / "home"
    fill(home, 0, 10)
    fill(home, 10, 1, ended=False)  # s-0010: begun, owner gone, never ended
    fill(home, 11, 10)
    assert cli(home, "checkpoint").exit_code == 0
    fill(home, 21, 5)
    result = cli(home, "certify", "--since", "latest")
    assert result.exit_code == 1
    assert "range: records 42 to 51 (10) after the checkpoint of 41 records" in result.output
    assert "CRITICAL saga s-0010: saga 'x' crashed and was never recovered" in result.output
    assert "NOT CERTIFIED: 6 sagas, 10 records, 1 critical" in result.output


def test_a_record_count_names_the_range_and_a_forged_note_is_refused(
    home: Path, tmp_path: Path
) -> None:
    result = cli(home, "certify", "--since", "330")
    assert result.exit_code == 0, result.output
    assert "range: records 331 to 350 (20) after record 330; read from record 301" in result.output
    forged = tmp_path / "forged.note"
    forged.write_text((tmp_path / "saved.note").read_text().replace("\n300\n", "\n299\n"))
    refused = cli(home, "certify", "--since", str(forged))
    assert refused.exit_code != 0
    assert "the checkpoint is rejected" in refused.output


def test_memory_does_not_grow_with_the_log_before_the_range(tmp_path: Path) -> None:
    """Peak memory while certifying the last 100 records of logs of 400 and 2,400 records,
    read from the first record (no resume point), is about the same."""
    peaks = []
    for count in (400, 2400):
        home = tmp_path / str(count)
        with FileLogStore(home, segment_records=200) as store:
            for batch in range(0, count, 100):
                entries = [Entry("t", None, {"n": n}, n) for n in range(batch, batch + 100)]
                store.append(entries, sync=False)
        fill(home, count, 50)
        tracemalloc.start()
        cert, _, span, _ = certify_since(home, FileLogSource(home), count, None)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert cert["ok"], cert["findings"]
        assert (span.after, span.to, span.read_from) == (count, count + 100, 0)
        assert cert["counts"]["sagas"] == 50
    assert peaks[1] < peaks[0] * 1.3, peaks
