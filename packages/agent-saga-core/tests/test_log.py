"""The log: canonical records, the hash formula, seq across restarts, damage detection."""

from __future__ import annotations

import errno
import hashlib
import hmac
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from agent_saga import (
    AgentKit,
    CorruptLogError,
    Entry,
    FileLogStore,
    MemoryLogStore,
    Record,
    StoreFailedError,
    default_kit,
    verify_file,
)
from agent_saga._log.chain import GENESIS
from agent_saga._log.codec import CodecError, canonical, decode, is_flat, to_jsonable
from agent_saga.testing import FaultyFileSystem
from hypothesis import given, settings
from hypothesis import strategies as st


def entry(n: int, saga: str | None = "s") -> Entry:
    return Entry("test", saga, {"n": n, "text": "zürich ✓"}, 1_700_000_000_000 + n)


def fill(home: Path, count: int) -> None:
    with FileLogStore(home) as store:
        for i in range(count):
            store.append([entry(i)], sync=i == count - 1)


def test_records_are_canonical_json_and_hash_formula_holds(home: Path) -> None:
    fill(home, 3)
    lines = (home / "log.jsonl").read_bytes().splitlines()
    prev = GENESIS
    for seq, line in enumerate(lines, start=1):
        obj = json.loads(line)
        assert (
            line
            == json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        )
        stored_hash = obj.pop("hash")
        body = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        assert stored_hash == hashlib.sha256(bytes.fromhex(prev) + body.encode()).hexdigest()
        assert obj["seq"] == seq
        assert obj["prev"] == prev
        prev = stored_hash
    assert "zürich ✓".encode() in lines[0]


def test_keyed_chain_uses_hmac(home: Path) -> None:
    key = b"k" * 32
    with FileLogStore(home, key=key) as store:
        (record,) = store.append([entry(1)], sync=True)
    obj = json.loads((home / "log.jsonl").read_bytes())
    obj.pop("hash")
    body = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    expected = hmac.new(key, bytes.fromhex(GENESIS) + body, hashlib.sha256).hexdigest()
    assert record.hash == expected
    assert not verify_file(home / "log.jsonl").ok  # without the key it does not verify
    with FileLogStore(home, key=key) as store:
        assert store.verify().ok


def test_seq_continues_across_restarts(home: Path) -> None:
    fill(home, 2)
    fill(home, 2)
    with FileLogStore(home) as store:
        seqs = [r.seq for r in store.records()]
        assert seqs == [1, 2, 3, 4]
        assert store.verify().ok


def test_seq_continues_across_processes(home: Path) -> None:
    code = (
        "from agent_saga import FileLogStore, Entry\n"
        f"s = FileLogStore({str(home)!r})\n"
        "print(s.append([Entry('test', None, {}, 0)], sync=True)[0].seq)\n"
        "s.close()\n"
    )
    seqs = [
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.strip()
        for _ in range(3)
    ]
    assert seqs == ["1", "2", "3"]


def test_two_stores_on_one_home_continue_one_chain(home: Path) -> None:
    first, second = FileLogStore(home), FileLogStore(home)
    first.append([entry(1)], sync=True)
    second.append([entry(2)], sync=True)
    first.append([entry(3)], sync=True)
    first.close()
    second.close()
    report = verify_file(home / "log.jsonl")
    assert report.ok
    assert report.records == 3


def flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def record_offsets(path: Path) -> list[int]:
    offsets, pos = [], 0
    for line in path.read_bytes().splitlines(keepends=True):
        offsets.append(pos)
        pos += len(line)
    return offsets


@pytest.mark.parametrize("target", range(0, 400, 37))
def test_any_flipped_byte_is_detected_at_its_record(home: Path, target: int) -> None:
    fill(home, 8)
    path = home / "log.jsonl"
    size = path.stat().st_size
    offset = target * size // 400
    flip(path, offset)
    report = verify_file(path)
    assert not report.ok
    assert report.error is not None
    starts = record_offsets(path)
    expected = max(s for s in starts if s <= offset)
    # Flipping a byte of a record's hash can only be seen at the next record's prev.
    assert report.error.offset in {expected, *[s for s in starts if s > expected][:1]}
    with pytest.raises(CorruptLogError) as info:
        FileLogStore(home)  # every record was synced: no damage may be repaired away
    assert info.value.offset == report.error.offset
    assert str(report.error.offset) in str(info.value)


def test_edit_that_keeps_valid_json_is_detected(home: Path) -> None:
    fill(home, 4)
    path = home / "log.jsonl"
    path.write_bytes(path.read_bytes().replace(b'"n":2', b'"n":9'))
    report = verify_file(path)
    assert not report.ok
    assert report.error is not None
    assert report.error.seq == 3
    assert "hash does not match" in report.error.reason


@pytest.mark.parametrize(
    "garbage",
    [b"[" * 5000 + b"\n", b"\xff\xfe\n", b"{}\n", b"null\n", b'{"a":1,"a":2}\n', b"NaN\n", b"x"],
)
def test_torn_tail_beyond_the_synced_part_is_repaired(home: Path, garbage: bytes) -> None:
    fill(home, 2)
    path = home / "log.jsonl"
    size = path.stat().st_size
    with path.open("ab") as handle:
        handle.write(garbage)
    report = verify_file(path)  # a read-only check names the damage
    assert report.error is not None
    assert (report.error.offset, report.error.seq) == (size, 3)
    with FileLogStore(home) as store:
        assert store.repairs[0]["offset"] == size
        records = list(store.records())
    assert [r.seq for r in records] == [1, 2, 3]
    assert records[2].kind == "store.repaired"
    assert records[2].data["discarded_sha256"] == hashlib.sha256(garbage).hexdigest()
    assert (home / "log.jsonl.broken.1").read_bytes() == garbage
    assert verify_file(path).ok
    with FileLogStore(home) as again:  # repair happened once; reopening changes nothing
        assert again.repairs == []
        assert len(list(again.records())) == 3


def test_damage_inside_the_synced_part_fails_closed(home: Path) -> None:
    fill(home, 3)
    path = home / "log.jsonl"
    last = record_offsets(path)[-1]
    flip(path, last + 20)  # the newest record, already acknowledged as durable
    with pytest.raises(CorruptLogError, match="inside the synced part") as info:
        FileLogStore(home)
    assert info.value.offset == last
    assert not list(home.glob("log.jsonl.broken.*"))


def test_damage_followed_by_records_fails_closed(home: Path) -> None:
    fill(home, 3)
    path = home / "log.jsonl"
    (home / "log.synced").write_bytes(b"")  # even with no watermark
    second = record_offsets(path)[1]
    flip(path, second + 20)
    with pytest.raises(CorruptLogError, match="records follow") as info:
        FileLogStore(home)
    assert info.value.offset == second


def test_log_shorter_than_what_was_synced_fails_closed(home: Path) -> None:
    fill(home, 3)
    path = home / "log.jsonl"
    os.truncate(path, record_offsets(path)[-1])  # drop the newest acknowledged record
    assert verify_file(path).ok  # the bare chain cannot see it...
    with pytest.raises(CorruptLogError, match="were synced"):
        FileLogStore(home)  # ...the synced watermark can


def test_oversized_record_is_refused_and_not_read(home: Path) -> None:
    with FileLogStore(home) as store:
        with pytest.raises(CodecError):
            store.append([Entry("big", None, {"x": "a" * (5 * 1024 * 1024)}, 0)], sync=True)
        assert store.verify().records == 0
    path = home / "log.jsonl"
    path.write_bytes(b"a" * (5 * 1024 * 1024) + b"\n")
    report = verify_file(path)
    assert report.error is not None
    assert "longer than" in report.error.reason


@pytest.mark.parametrize("errno_", [errno.EIO, errno.ENOSPC])
def test_write_error_fails_the_store(home: Path, errno_: int) -> None:
    fs = FaultyFileSystem(errno_=errno_)
    store = FileLogStore(home, fs=fs)
    store.append([entry(1)], sync=True)
    fs.fail_write_at = fs.write_calls + 1
    with pytest.raises(StoreFailedError, match="injected write failure"):
        store.append([entry(2)], sync=True)
    fs.fail_write_at = None
    with pytest.raises(StoreFailedError, match="reopen"):
        store.append([entry(3)], sync=True)
    assert store.health()
    store.close()
    with FileLogStore(home) as reopened:  # reopening re-verifies from disk
        assert [r.seq for r in reopened.records()] == [1]


def test_fsync_error_fails_the_store_without_retry(home: Path) -> None:
    fs = FaultyFileSystem()
    store = FileLogStore(home, fs=fs)
    fs.fail_fsync_at = fs.fsync_calls + 1
    with pytest.raises(StoreFailedError, match="injected fsync failure"):
        store.append([entry(1)], sync=True)
    calls = fs.fsync_calls
    with pytest.raises(StoreFailedError):
        store.sync()
    with pytest.raises(StoreFailedError):
        store.append([entry(2)], sync=True)
    assert fs.fsync_calls == calls  # never retried
    assert "failed" in store.health()[0]


def test_short_writes_are_completed(home: Path) -> None:
    fs = FaultyFileSystem(short_writes=True)
    with FileLogStore(home, fs=fs) as store:
        store.append([entry(i) for i in range(5)], sync=True)
    assert verify_file(home / "log.jsonl").records == 5


def test_memory_store_verifies_and_detects_tampering() -> None:
    store = MemoryLogStore()
    records = store.append([entry(i) for i in range(3)], sync=True)
    assert store.verify().ok
    forged = Record(2, 0, "test", "s", {"n": 99}, records[0].hash, records[1].hash)
    store.tamper(1, forged)
    report = store.verify()
    assert not report.ok
    assert report.error is not None
    assert report.error.offset == 1


def test_default_kit_is_durable_on_disk(home: Path) -> None:
    kit = default_kit()
    assert kit.store.kind == "file"
    assert kit.guarantees()["store"]["durable"] is True
    assert Path(kit.store.describe()["path"]).parent == home  # type: ignore[arg-type]


def test_memory_store_must_be_named(home: Path) -> None:
    with AgentKit(home=home, store="memory") as kit:
        assert kit.store.kind == "memory"
        manifest = kit.guarantees()
        assert manifest["store"]["durable"] is False
        assert any("keeps nothing" in line for line in manifest["not_claimed"])
    with pytest.raises(ValueError, match="store must be"):
        AgentKit(home=home, store="sqlite-ish")


def test_quickstart_survives_the_process(home: Path) -> None:
    """A saga run in a child process with default settings is on disk afterwards."""
    code = (
        "from agent_saga import saga_scope, tool, REVERSIBLE\n"
        "@tool(semantics=REVERSIBLE)\n"
        "def note(x): return x\n"
        "with saga_scope('child'):\n"
        "    note(1)\n"
    )
    env = {**os.environ, "AGENT_SAGA_HOME": str(home)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    with FileLogStore(home) as store:
        kinds = [r.kind for r in store.records()]
    assert kinds == ["saga.begin", "step.intent", "step.done", "saga.end"]


def test_codec_is_strict() -> None:
    assert canonical({"b": 1, "a": [1.5, "é"]}) == '{"a":[1.5,"é"],"b":1}'.encode()
    with pytest.raises(CodecError):
        canonical({"x": float("nan")})
    for bad in (b'{"a":1,"a":2}', b"NaN", b"[" * 100_000, b"\xff", b'"\\ud800', b"1e400x"):
        with pytest.raises(CodecError):
            decode(bad)
    assert to_jsonable({"x": float("inf")}) == {"x": {"$repr": "inf", "$type": "float"}}
    assert to_jsonable("\ud800") == {"$repr": "'\\ud800'", "$type": "str"}
    assert to_jsonable({1: "a"}) == {"$repr": "{1: 'a'}", "$type": "dict"}
    assert to_jsonable((1, {2, 3})) == [1, [2, 3]]
    assert decode(canonical(2**80)) == 2**80


def test_a_cycle_is_a_codec_error_whatever_the_recursion_limit() -> None:
    code = (
        "import sys\n"
        "from agent_saga._log.codec import CodecError, canonical\n"
        "sys.setrecursionlimit(100_000)\n"
        "loop = []\n"
        "loop.append(loop)\n"
        "try:\n"
        "    canonical({'a': loop})\n"
        "except CodecError as exc:\n"
        "    print('refused:', exc)\n"
        "print(canonical({'a': [1]}).decode())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "refused: no canonical JSON form: Circular reference detected",
        '{"a":[1]}',
    ]


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, derandomize=True)
@given(_JSON)
def test_canonical_is_the_standard_encoding_with_sorted_keys(value: object) -> None:
    try:
        expected = json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        ).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: no canonical form
        with pytest.raises(CodecError):
            canonical(value)
        return
    assert canonical(value) == expected
    assert decode(expected) == value


@settings(max_examples=300, derandomize=True)
@given(st.dictionaries(st.text(max_size=4), _JSON, max_size=4))
def test_flat_dicts_are_exactly_those_to_jsonable_keeps(value: dict[str, object]) -> None:
    flat = is_flat(value)
    scalars = all(v is None or type(v) in (bool, int, float, str) for v in value.values())
    encodable = True
    try:
        canonical(value)
    except CodecError:
        encodable = False
    assert flat == (scalars and encodable)
    if flat:
        assert to_jsonable(value) == value


def test_concurrent_processes_and_threads_keep_one_chain(home: Path) -> None:
    code = (
        "import sys, threading\n"
        "from agent_saga import FileLogStore, Entry\n"
        "store = FileLogStore(sys.argv[1])\n"
        "def work(t):\n"
        "    for i in range(50):\n"
        "        store.append([Entry('p', None, {'p': sys.argv[2], 't': t, 'i': i}, 0)],"
        " sync=i % 3 == 0)\n"
        "threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]\n"
        "[t.start() for t in threads]; [t.join() for t in threads]\n"
        "store.close()\n"
    )
    FileLogStore(home).close()
    procs = [subprocess.Popen([sys.executable, "-c", code, str(home), str(p)]) for p in range(4)]
    assert [p.wait() for p in procs] == [0, 0, 0, 0]
    report = verify_file(home / "log.jsonl")
    assert report.ok, report.error
    assert report.records == 4 * 4 * 50
    with FileLogStore(home) as store:
        seen = {(r.data["p"], r.data["t"], r.data["i"]) for r in store.records()}
    assert len(seen) == 800
