"""Records received from elsewhere: a batch checked in one pass agrees with the log's reader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agent_saga import AgentKit, read_log
from agent_saga.proofs import ChainError, check_record, check_records

GENESIS = "0" * 64


def _shipped(home: Path) -> list[dict[str, object]]:
    kit = AgentKit(home=home, checkpoints=False)

    @kit.tool(name="crm.tag", compensate=lambda key: None)
    def tag(key: str, note: str) -> str:
        return f"tagged {key} ({note})"

    for i in range(3):
        with kit.transaction(f"tagging-{i}"):
            tag(f"k{i}", "café ☕")
    kit.close()
    return [record.to_json() for record in read_log(home)]


def test_a_batch_checks_like_each_record_and_gives_the_stored_data_bytes(tmp_path: Path) -> None:
    shipped = _shipped(tmp_path / "home")
    checked = check_records(shipped, seq=1, prev=GENESIS)
    prev = GENESIS
    for obj, (record, data_bytes) in zip(shipped, checked, strict=True):
        assert record == check_record(obj, seq=record.seq, prev=prev)
        canonical = json.dumps(
            obj["data"], sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )
        assert data_bytes == canonical.encode()
        prev = record.hash
    assert [r.seq for r, _ in checked] == list(range(1, len(shipped) + 1))
    assert any(r.salts for r, _ in checked)  # committed values were checked through their salts


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("data", {"tampered": True}, "hash does not match"),
        ("seq", 99, "seq 99 where"),
        ("prev", "f" * 64, "prev does not match"),
        ("ts", "now", "seq and ts must be integers"),
    ],
)
def test_a_batch_is_refused_at_its_first_bad_record(
    tmp_path: Path, field: str, value: object, reason: str
) -> None:
    shipped = _shipped(tmp_path / "home")
    bad = dict(shipped[4])
    bad[field] = value
    with pytest.raises(ChainError, match=f"record 5: {reason}"):
        check_records([*shipped[:4], bad, *shipped[5:]], seq=1, prev=GENESIS)
    assert shipped[4][field] != value  # the caller's objects are not touched
