"""Sealing and checking take shortcuts for the usual record shapes; the bytes never change.

``vectors/sealed_records_v2.json`` holds records sealed by the code before the shortcuts (the
reference implementation in ``_log.commit``), each with the salts it drew: sealed again with the
same salts they must come out byte for byte, and they must read back as they are. For any JSON
value shaped as the engine writes them, the line check rebuilds the hashed form from the stored
bytes (and ``test_record_commitments.py`` checks any JSON value against the reference forms).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_saga._log import lineforms
from agent_saga._log.chain import Chain, ChainBreak, check_line_fast, parse_line
from agent_saga._log.commit import SALT_LEN, SALT_POOL, sealed_forms
from agent_saga._log.lineforms import hashed_data
from agent_saga._log.records import GENESIS, Entry, Record
from hypothesis import given, settings
from hypothesis import strategies as st

VECTORS = json.loads((Path(__file__).parent / "vectors" / "sealed_records_v2.json").read_text())
KEY = b"k" * 32


@pytest.fixture(autouse=True)
def _warm(monkeypatch: pytest.MonkeyPatch) -> None:
    """The line check takes the rebuilt-form shortcut from the first line (a process otherwise
    decodes its first lines, see ``lineforms.WARM_AFTER``)."""
    monkeypatch.setattr(lineforms, "WARM_AFTER", 0)


def salts_of(line: bytes) -> list[bytes]:
    salts = json.loads(line).get("salts", "").encode()
    return [salts[at : at + SALT_LEN] for at in range(0, len(salts), SALT_LEN)]


def next_salts(salts: list[bytes]) -> None:
    """Make ``salts`` the next salts the chain draws, in this order."""
    SALT_POOL.extend(reversed(salts))


def counted(salts: list[bytes]) -> Callable[[], bytes]:
    pending: Iterator[bytes] = iter(salts)
    return lambda: next(pending)


@pytest.mark.parametrize("vector", VECTORS, ids=lambda v: f"{v['kind']}-{v['seq']}-{v['keyed']}")
def test_records_sealed_before_come_out_byte_for_byte_and_read_back(vector: dict[str, Any]) -> None:
    chain = Chain(KEY if vector["keyed"] else None)
    line = vector["line"].encode()
    entry = Entry(vector["kind"], vector["saga"], vector["data"], vector["ts"])
    before = len(SALT_POOL)
    next_salts(salts_of(line))
    try:
        record, sealed = chain.seal(entry, vector["seq"], vector["prev"])
        assert len(SALT_POOL) == before  # it drew exactly the salts of the record
    finally:
        del SALT_POOL[before:]
    assert sealed == line + b"\n"
    read = parse_line(chain, line, vector["seq"], vector["prev"])
    assert read == record
    assert isinstance(read, Record)
    assert read.data == vector["data"]
    assert check_line_fast(chain, line, vector["seq"], vector["prev"].encode()) == (
        vector["seq"],
        record.hash.encode(),
    )


def test_the_usual_shapes_are_checked_from_their_bytes() -> None:
    """Values of scalars, or objects or lists of scalars, are checked without decoding the
    record; values nested deeper are checked by decoding it."""
    rebuilt = set()
    for vector in VECTORS:
        line = vector["line"].encode()
        if b'"salts":"' in line:
            cut = line.rfind(b',"hash":"')
            if hashed_data(line, cut, b"".join(salts_of(line))) is not None:
                rebuilt.add(vector["seq"])
    assert rebuilt == {1, 2, 3, 5, 6, 8, 9, 12, 13, 14}  # not 4, 7, 10, 11, 18: nested


SCALAR = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.text()
    | st.floats(allow_nan=False, allow_infinity=False)
)
FLAT = SCALAR | st.dictionaries(st.text(), SCALAR, max_size=5) | st.lists(SCALAR, max_size=5)


@settings(max_examples=200, deadline=None)
@given(
    data=st.dictionaries(
        st.sampled_from(["args", "result", "error", "cause", "tool", "ordinal"]), FLAT
    ).filter(lambda d: any(key in d for key in ("args", "cause", "error", "result")))
)
def test_flat_values_are_rebuilt_from_the_stored_bytes(data: dict[str, Any]) -> None:
    record, line = Chain().seal(Entry("step.done", "saga-1", data, 5), 1, GENESIS)
    cut = line.rfind(b',"hash":"')
    assert record.salts is not None
    rebuilt = hashed_data(line, cut, record.salts.encode())
    assert rebuilt is not None
    drawn = record.salts.encode()
    reference = sealed_forms(
        data, counted([drawn[at : at + SALT_LEN] for at in range(0, len(drawn), SALT_LEN)])
    )
    assert reference is not None
    assert rebuilt == b'{"data":' + reference[0]


@pytest.mark.parametrize("warm", [True, False], ids=["shortcut", "decoded"])
@pytest.mark.parametrize("keyed", [False, True])
def test_any_changed_byte_of_a_committed_record_is_caught(
    keyed: bool, warm: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both ways a line is checked (the shortcut, and decoding before a process warms up to
    it) catch every changed byte and accept the sealed line."""
    monkeypatch.setattr(lineforms, "WARM_AFTER", 0 if warm else 10**9)
    chain = Chain(KEY if keyed else None)
    data: dict[str, Any] = {
        "ordinal": 1,
        "tool": "pay",
        "args": {"amount": 1250, "to": "acme"},
        "result": "ok",
    }
    record, line = chain.seal(Entry("step.done", "saga-1", data, 5), 1, GENESIS)
    line = line[:-1]
    assert check_line_fast(chain, line, 1, GENESIS.encode()) == (1, record.hash.encode())
    for at in range(len(line)):
        for changed in {line[at] ^ 1, ord("0") if line[at] != ord("0") else ord("1")}:
            forged = line[:at] + bytes([changed]) + line[at + 1 :]
            assert isinstance(check_line_fast(chain, forged, 1, GENESIS.encode()), ChainBreak), (
                at,
                forged,
            )
            assert isinstance(parse_line(chain, forged, 1, GENESIS), ChainBreak)


def test_leaves_moved_between_values_or_salts_swapped_are_caught() -> None:
    data: dict[str, Any] = {"args": {"a": "1", "b": "2"}, "result": "3"}
    record, line = Chain().seal(Entry("step.done", None, data, 5), 1, GENESIS)
    assert record.salts is not None
    salts = record.salts
    swapped_salts = line.replace(salts.encode(), (salts[22:44] + salts[:22] + salts[44:]).encode())
    swapped_values = line.replace(b'"a":"1","b":"2"', b'"a":"2","b":"1"')
    for forged in (swapped_salts, swapped_values):
        assert forged != line
        assert isinstance(check_line_fast(Chain(), forged[:-1], 1, GENESIS.encode()), ChainBreak)
