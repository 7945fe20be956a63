"""Opening verifies the open segment's last stretch only: the same tail as a full check for an
intact or torn segment, damage in the stretch refused, damage before it left to ``verify``."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_saga import CorruptLogError, Entry, FileLogStore, verify_file
from agent_saga._log.chain import Chain
from agent_saga._log.files import OS, open_read
from agent_saga._log.opentail import scan_tail_on_open
from agent_saga._log.repair import scan_on_open
from agent_saga._log.scan import Tail

STRETCH = 4096


def write(home: Path, count: int) -> None:
    with FileLogStore(home) as store:
        for n in range(count):
            store.append([Entry("t", None, {"n": n, "pad": "x" * 40}, n)], sync=n % 10 == 0)
        store.sync()


def both(home: Path) -> tuple[tuple[Tail, object], tuple[Tail, object]]:
    fd = OS.open_rw(str(home / "log.jsonl"))
    mark = open_read(OS, str(home / "log.synced"))
    try:
        args = (OS, fd, mark, Chain(), str(home / "log.jsonl"))
        quick = scan_tail_on_open(*args, seq=0, prev="0" * 64, check_bytes=STRETCH)
        full = scan_on_open(*args, seq=0, prev="0" * 64)
        return quick, full
    finally:
        OS.close(fd)
        OS.close(mark)


def test_an_intact_segment_gives_the_tail_a_full_check_gives(tmp_path: Path) -> None:
    write(tmp_path, 400)
    (quick, repair), (full, _) = both(tmp_path)
    assert (
        (quick.seq, quick.hash, quick.end)
        == (full.seq, full.hash, full.end)
        == (400, full.hash, full.end)
    )
    assert repair is None
    assert quick.records < 100  # only the stretch was read


def test_damage_in_the_stretch_is_refused_and_before_it_is_left_to_verify(
    tmp_path: Path,
) -> None:
    write(tmp_path, 400)
    log = tmp_path / "log.jsonl"
    data = bytearray(log.read_bytes())
    late = data.rindex(b'"n":390')
    data[late + 5] = ord("1")  # record 391 now says n=310: its hash no longer matches
    log.write_bytes(bytes(data))
    with pytest.raises(CorruptLogError, match="hash"):
        both(tmp_path)
    write_fresh = tmp_path / "early"
    write(write_fresh, 400)
    log = write_fresh / "log.jsonl"
    data = bytearray(log.read_bytes())
    early = data.index(b'"n":3,')
    data[early + 4] = ord("4")
    log.write_bytes(bytes(data))
    fd = OS.open_rw(str(log))
    mark = open_read(OS, str(write_fresh / "log.synced"))
    try:
        tail, _ = scan_tail_on_open(
            OS, fd, mark, Chain(), str(log), seq=0, prev="0" * 64, check_bytes=STRETCH
        )
    finally:
        OS.close(fd)
        OS.close(mark)
    assert tail.seq == 400  # opening does not re-read the early part...
    report = verify_file(log)
    assert not report.ok  # ...verify does
    assert report.error is not None
    assert report.error.seq == 4
