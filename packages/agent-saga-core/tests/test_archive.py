"""Archiving sealed segments to a directory and to S3 (moto's server on 127.0.0.1).

An archived segment's local file is gone only once its copy is durable and verified; the log
still opens, verifies, reads and proves from the archive; an archived segment altered there is
caught by verify with its location and the offset in it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_saga import Entry, FileLogStore, read_log
from agent_saga.cli import main
from agent_saga.proofs import record_leaf, verify_inclusion
from agent_saga.proofs._audit import snapshot
from agent_saga.proofs._checkpoint import open_checkpoint
from agent_saga.proofs._signing import home_verifier
from click.testing import CliRunner, Result

FAKE_AWS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_CONFIG_FILE": "/nonexistent/agent-saga-tests/config",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/agent-saga-tests/credentials",
    "AWS_EC2_METADATA_DISABLED": "true",
}
SEALED = [41, 81, 121, 161, 201, 241]
"""The sealed segments that move (``log.jsonl``, the first, stays in the home)."""


def cli(home: Path, *args: str) -> Result:
    return CliRunner().invoke(main, ["--home", str(home), *args])


def fill(home: Path, start: int, count: int) -> None:
    with FileLogStore(home, segment_records=40) as store:
        for n in range(start, start + count):
            store.append([Entry("t", None, {"n": n}, n)], sync=n % 9 == 0)


def name(first: int) -> str:
    return "log.jsonl" if first == 1 else f"{first:020d}.jsonl"


def local(home: Path, first: int) -> Path:
    return home / name(first) if first == 1 else home / "segments" / name(first)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    fill(home, 0, 300)
    assert cli(home, "checkpoint").exit_code == 0
    return home


def check_archived(home: Path, result: Result, where: str) -> None:
    assert result.exit_code == 0, result.output
    assert "6 segment(s) moved to the archive" in result.output
    assert all(not local(home, first).exists() for first in SEALED)
    assert local(home, 281).exists()  # the open segment stays
    assert local(home, 1).exists()
    verified = cli(home, "verify")
    assert verified.exit_code == 0, verified.output
    assert "log intact: 300 records" in verified.output
    assert "consistent with the latest checkpoint (300 records)" in verified.output
    assert [r.data["n"] for r in read_log(home)] == list(range(300))
    # provable: an archived record's inclusion under the signed checkpoint
    log = snapshot(home, home=home)
    assert log.tree is not None
    verifier = home_verifier(home)
    assert verifier is not None
    checkpoint = open_checkpoint((home / "checkpoints" / "latest.note").read_text(), [verifier])
    record = log.records[44]
    proof = log.tree.inclusion_proof(44, checkpoint.size)
    verify_inclusion(record_leaf(record), 44, checkpoint.size, proof, checkpoint.root)
    # the store still opens (from the summaries) and appends
    fill(home, 300, 5)
    assert cli(home, "verify").exit_code == 0
    again = cli(home, "archive")
    assert "0 segment(s) moved" in again.output
    assert where in (home / "segments" / f"{41:020d}.archived").read_text()


def test_archive_to_a_directory(home: Path, tmp_path: Path) -> None:
    target = tmp_path / "cold"
    result = cli(home, "archive", "--to", str(target))
    check_archived(home, result, str(target))
    assert sorted(p.name for p in target.iterdir()) == sorted(name(f) for f in SEALED)


def test_an_altered_archived_segment_is_caught_with_its_name_and_offset(
    home: Path, tmp_path: Path
) -> None:
    target = tmp_path / "cold"
    assert cli(home, "archive", "--to", str(target)).exit_code == 0
    copy = target / name(81)
    raw = copy.read_bytes()
    offset = raw.index(b'"n":90}')
    copy.write_bytes(raw.replace(b'"n":90}', b'"n":91}'))
    result = cli(home, "verify")
    assert result.exit_code == 1
    flat = result.output.replace("\n", "")
    line_start = raw.rindex(b"\n", 0, offset) + 1
    assert f"in {copy} at byte offset {line_start} (seq 91)" in flat


def test_a_missing_archive_copy_fails_closed(home: Path, tmp_path: Path) -> None:
    target = tmp_path / "cold"
    assert cli(home, "archive", "--to", str(target)).exit_code == 0
    (target / name(41)).unlink()
    result = cli(home, "verify")
    assert result.exit_code == 1
    assert "archived segment cannot be read" in result.output.replace("\n", "")


def test_a_bad_archive_setting_is_refused(home: Path) -> None:
    result = cli(home, "archive", "--to", "relative/dir")
    assert result.exit_code == 2
    assert "give an absolute directory or s3://bucket/prefix" in result.output
    assert not (home / "archive").exists()


# -- S3 (moto's server) -----------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def moto_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``python -m moto.server`` on 127.0.0.1 in its own process."""
    log = tmp_path_factory.mktemp("moto") / "server.log"
    port = _free_port()
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            env={**os.environ, **FAKE_AWS},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    try:
        while True:
            try:
                with urllib.request.urlopen(f"{url}/moto-api/data.json", timeout=1):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"moto's server did not start: {log.read_text()[-2000:]}")
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(10)


@pytest.fixture
def bucket(moto_url: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> str:
    import boto3

    for key, value in FAKE_AWS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    name = str(request.node.name).replace("_", "-")[:50]
    boto3.client("s3", endpoint_url=moto_url).create_bucket(Bucket=name)
    return name


def test_archive_to_s3(home: Path, moto_url: str, bucket: str) -> None:
    url = f"s3://{bucket}/fleet-a?endpoint={moto_url}"
    result = cli(home, "archive", "--to", url)
    check_archived(home, result, f"s3://{bucket}/fleet-a/{name(41)}")


def test_an_altered_s3_segment_is_caught_with_its_name_and_offset(
    home: Path, moto_url: str, bucket: str
) -> None:
    import boto3

    assert cli(home, "archive", "--to", f"s3://{bucket}?endpoint={moto_url}").exit_code == 0
    client = boto3.client("s3", endpoint_url=moto_url)
    raw = client.get_object(Bucket=bucket, Key=name(121))["Body"].read()
    offset = raw.index(b'"n":130}')
    client.put_object(Bucket=bucket, Key=name(121), Body=raw.replace(b'"n":130}', b'"n":131}'))
    result = cli(home, "verify")
    assert result.exit_code == 1
    flat = result.output.replace("\n", "")
    line_start = raw.rindex(b"\n", 0, offset) + 1
    assert f"in s3://{bucket}/{name(121)} at byte offset {line_start} (seq 131)" in flat


def test_the_saga_index_is_built_over_segments_archived_to_s3(
    home: Path, moto_url: str, bucket: str
) -> None:
    from agent_saga._log.chain import Chain
    from agent_saga._log.sagaindex import SagaIndex

    assert cli(home, "archive", "--to", f"s3://{bucket}?endpoint={moto_url}").exit_code == 0
    index = SagaIndex(home, Chain())
    try:
        index.rebuild()  # walks the archived segments: read through the archive, not as files
        assert index._known == 300
    finally:
        index.close()


def test_catching_the_saga_index_up_touches_no_segment_before_its_point(
    home: Path, moto_url: str, bucket: str
) -> None:
    """The writer's hook catches the index up every 256 records: archived segments before the
    indexed point must not be fetched (nor even asked for) each time."""
    import boto3
    from agent_saga._log.chain import Chain
    from agent_saga._log.sagaindex import SagaIndex

    assert cli(home, "archive", "--to", f"s3://{bucket}?endpoint={moto_url}").exit_code == 0
    index = SagaIndex(home, Chain())
    try:
        index.refresh()
        client = boto3.client("s3", endpoint_url=moto_url)
        for first in SEALED:  # the archive is out of reach now
            client.delete_object(Bucket=bucket, Key=name(first))
        fill(home, 300, 5)
        index.refresh()
        assert index._known == 305
    finally:
        index.close()


def test_sagas_in_archived_segments_are_read_through_the_index(tmp_path: Path) -> None:
    """``replay``, ``sagas`` and ``certify --since`` read a saga's records where the index says
    they are: in an archived segment, from the archive."""
    read_archived_sagas(tmp_path, str(tmp_path / "cold"))


def test_sagas_in_segments_archived_to_s3_are_read_through_the_index(
    tmp_path: Path, moto_url: str, bucket: str
) -> None:
    read_archived_sagas(tmp_path, f"s3://{bucket}?endpoint={moto_url}")


def read_archived_sagas(tmp_path: Path, target: str) -> None:
    home = tmp_path / "home"

    def sagas(start: int, count: int) -> None:
        with FileLogStore(home, segment_records=40) as store:
            for n in range(start, start + count):
                sid = f"s-{n:04d}"
                store.append([Entry("saga.begin", sid, {"name": "x", "owner": "o"}, n)], sync=False)
                store.append([Entry("saga.end", sid, {"status": "committed"}, n)], sync=True)

    sagas(0, 100)
    assert cli(home, "checkpoint").exit_code == 0
    assert cli(home, "replay", "s-0003").exit_code == 0  # the index now covers the 200 records
    saved = tmp_path / "saved.note"
    saved.write_text((home / "checkpoints" / "latest.note").read_text())
    sagas(100, 10)
    moved = cli(home, "archive", "--to", target)
    assert "4 segment(s) moved to the archive" in moved.output, moved.output
    assert not local(home, 41).exists()
    shown = cli(home, "replay", "s-0030")  # records 61 and 62: segment 41, archived
    assert shown.exit_code == 0, shown.output
    assert "s-0030" in shown.output
    listed = cli(home, "sagas", "--limit", "200")
    assert listed.exit_code == 0, listed.output
    assert "s-0000" in listed.output
    assert "s-0109" in listed.output
    certified = cli(home, "certify", "--since", str(saved))
    assert certified.exit_code == 0, certified.output
    assert "certified: 10 sagas, 20 records, 0 critical" in certified.output
