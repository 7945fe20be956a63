"""Record version 2: the chain hash commits to each maskable value through its own salt.

Masking a value keeps the record's hash, while its kind, saga, seq, ts and every value left in
the clear are still checked against it; the masked value cannot be guessed back. Version 1
logs, written before, still read and verify.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from agent_saga import AgentKit, SequentialIds, tool
from agent_saga._log.chain import Chain, ChainBreak, Masked, check_line_fast, parse_line
from agent_saga._log.codec import canonical
from agent_saga._log.commit import MASKED_SALT, SALT_LEN, open_forms, sealed_forms
from agent_saga._log.forms import open_forms_fast, seal_forms
from agent_saga._log.records import GENESIS, Entry, Record
from agent_saga.cli import main
from agent_saga.proofs._masking import mask_record
from click.testing import CliRunner, Result
from hypothesis import given, settings
from hypothesis import strategies as st

CVV = "731"


def cli(home: Path, *args: str) -> Result:
    return CliRunner().invoke(main, ["--home", str(home), *args])


def sealed(data: dict[str, Any], kind: str = "step.intent") -> tuple[Record, bytes]:
    record, line = Chain().seal(Entry(kind, "saga-1", data, 1000), 1, GENESIS)
    return record, line[:-1]


INTENT = {"ordinal": 1, "tool": "pay", "args": {"card": {"cvv": CVV, "number": "4111"}, "n": 2}}


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(
    data=st.dictionaries(
        st.sampled_from(["args", "result", "error", "cause", "tool", "ordinal", "zz"]), JSON
    )
)
def test_any_record_is_stored_canonically_and_verifies_masked_or_not(
    data: dict[str, Any],
) -> None:
    record, line = Chain().seal(Entry("k", None, data, 1), 1, GENESIS)
    assert json.loads(line)["data"] == data
    assert line.startswith(b'{"data":' + canonical(data) + b',"hash":')
    assert isinstance(parse_line(Chain(), line[:-1], 1, GENESIS), Record)
    masked = mask_record(record, ("args",))
    if masked is not None:
        checked = parse_line(Chain(), masked[0], 1, GENESIS, allow_masked=True)
        assert isinstance(checked, Masked)
        assert checked.hash.decode() == record.hash


def test_masking_a_value_keeps_the_hash_and_drops_its_salt() -> None:
    record, _ = sealed(INTENT)
    assert record.salts is not None
    assert len(record.salts) == 3 * SALT_LEN  # one salt per value
    masked = mask_record(record, ("args", "card", "cvv"))
    assert masked is not None
    new_line, entry = masked
    assert entry == {"seq": 1, "paths": ["args.card.cvv"], "leaves": [0]}
    assert f'"{CVV}"'.encode() not in new_line
    checked = parse_line(Chain(), new_line, 1, GENESIS, allow_masked=True)
    assert isinstance(checked, Masked)
    assert checked.leaves == (0,)
    assert checked.hash.decode() == record.hash
    assert checked.record is not None
    assert checked.record.salts is not None
    assert checked.record.salts.startswith(MASKED_SALT)
    stored = json.loads(new_line)
    commitment = stored["data"]["args"]["card"]["cvv"]["$redacted"]
    # With the salt gone, guessing the three digits back is hopeless: every guess misses.
    for guess in range(1000):
        candidate = hashlib.sha256(f'"{guess:03d}"'.encode()).hexdigest()
        assert candidate != commitment


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("kind", "step.done"),
        ("saga", "saga-2"),
        ("ts", 2000),
        ("data.tool", "refund"),
        ("data.ordinal", 7),
        ("data.args.n", 3),
        ("data.args.card.number", "4000"),
        ("data.args.card.cvv.$redacted", "0" * 64),
    ],
)
def test_everything_but_the_masked_value_is_still_checked(field: str, value: object) -> None:
    record, _ = sealed(INTENT)
    masked = mask_record(record, ("args", "card", "cvv"))
    assert masked is not None
    obj = json.loads(masked[0])
    *parents, last = field.split(".")
    target = obj
    for part in parents:
        target = target[part]
    target[last] = value
    line = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    checked = parse_line(Chain(), line, 1, GENESIS, allow_masked=True)
    assert isinstance(checked, ChainBreak)
    assert checked.reason == "hash does not match the record's contents"


def test_only_committed_values_can_be_masked() -> None:
    record, _ = sealed({"ordinal": 1, "tool": "pay", "result": {"id": "ch_1"}}, "step.done")
    assert mask_record(record, ("result", "id")) is not None
    from agent_saga import LogError
    from agent_saga.proofs._masking import parse_masked_path

    with pytest.raises(LogError, match="only values under args, cause, error, result"):
        parse_masked_path("tool")


def test_each_value_gets_a_fresh_salt_in_every_process() -> None:
    first, _ = sealed(INTENT)
    second, _ = sealed(INTENT)
    assert first.salts != second.salts
    assert first.hash != second.hash
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a forked pool must not hand out the parent's next salts
        os.close(read)
        os.write(write, (sealed(INTENT)[0].salts or "").encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 4096).decode()
    os.close(read)
    os.waitpid(pid, 0)
    after = sealed(INTENT)[0].salts
    assert child
    assert child != after


def test_a_value_masked_without_a_signed_redaction_fails_verify(home: Path) -> None:
    """Masking correctly (the hash holds) is not enough: an administrator must sign for it."""

    @tool(name="commit.pay", semantics="reversible")
    def pay(card: dict[str, str]) -> str:
        return "ok"

    with AgentKit(home=home, ids=SequentialIds()) as kit, kit.transaction("buy"):
        pay({"cvv": CVV})
    log = home / "log.jsonl"
    lines = log.read_bytes().rstrip(b"\x00").splitlines()
    for index, line in enumerate(lines):
        checked = parse_line(Chain(), line, index + 1, json.loads(line)["prev"])
        assert isinstance(checked, Record)
        masked = mask_record(checked, ("args", "card"))
        if masked is not None:
            lines[index] = masked[0]
    log.write_bytes(b"\n".join(lines) + b"\n")
    assert f'"{CVV}"'.encode() not in log.read_bytes()
    result = cli(home, "verify")
    assert result.exit_code == 1
    assert "no signed redaction record accounts for them" in result.output
    assert cli(home, "sagas").exit_code == 1


# -- logs written by the previous version (record version 1) ----------------------------------


def v1_log(home: Path, records: list[tuple[str, str | None, dict[str, Any]]]) -> list[bytes]:
    """Lines as version 1 wrote them: the hash covers the stored bytes, no salts."""
    lines, prev = [], GENESIS
    for seq, (kind, saga, data) in enumerate(records, start=1):
        obj: dict[str, Any] = {
            "data": data, "kind": kind, "prev": prev, "saga": saga, "seq": seq,
            "ts": 1000 + seq, "v": 1,
        }  # fmt: skip
        body = json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
        obj["hash"] = prev = hashlib.sha256(bytes.fromhex(prev) + body).hexdigest()
        lines.append(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode())
    home.mkdir(parents=True, exist_ok=True)
    (home / "log.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    return lines


OLD_SAGA: list[tuple[str, str | None, dict[str, Any]]] = [
    ("saga.begin", "old-1", {"name": "buy"}),
    ("step.intent", "old-1", {"ordinal": 1, "tool": "pay", "args": {"card": {"cvv": CVV}}}),
    ("step.done", "old-1", {"ordinal": 1, "tool": "pay", "result": "ok"}),
    ("saga.end", "old-1", {"status": "committed", "steps": 1, "records": 3}),
]


def test_a_version_1_log_still_reads_verifies_and_grows(home: Path) -> None:
    v1_log(home, OLD_SAGA)
    assert cli(home, "verify").exit_code == 0
    with AgentKit(home=home, ids=SequentialIds()) as kit, kit.transaction("new"):
        pass
    result = cli(home, "verify")
    assert result.exit_code == 0, result.output
    assert '"v":2' in (home / "log.jsonl").read_text()
    listed = cli(home, "sagas")
    assert listed.exit_code == 0
    assert "old-1" in listed.output


def old_style_redaction(home: Path, lines: list[bytes]) -> None:
    """What ``redact`` of version 1 wrote: the record masked in place, an unsigned record."""
    obj = json.loads(lines[1])
    obj["data"]["args"]["card"]["cvv"] = {"$redacted": "later"}
    lines[1] = json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
    digest = hashlib.sha256(b"agent-saga redacted record v1\n" + lines[1]).hexdigest()
    last = json.loads(lines[-1])
    statement: dict[str, Any] = {
        "data": {"records": [{"seq": 2, "paths": ["args.card.cvv"], "digest": digest}]},
        "kind": "log.redaction", "prev": last["hash"], "saga": None, "seq": 5, "ts": 2000,
        "v": 1,
    }  # fmt: skip
    body = json.dumps(statement, sort_keys=True, separators=(",", ":")).encode()
    statement["hash"] = hashlib.sha256(bytes.fromhex(last["hash"]) + body).hexdigest()
    lines.append(json.dumps(statement, sort_keys=True, separators=(",", ":")).encode())
    (home / "log.jsonl").write_bytes(b"\n".join(lines) + b"\n")


def test_an_old_unsigned_redaction_counts_once_an_administrator_confirms_it(
    home: Path, admin_key: Path
) -> None:
    old_style_redaction(home, v1_log(home, OLD_SAGA))
    refused = cli(home, "verify")
    assert refused.exit_code == 1
    assert "not signed by an administrator key" in refused.output
    confirmed = cli(home, "redact", "--confirm", "--sign", str(admin_key))
    assert confirmed.exit_code == 0, confirmed.output
    assert "confirmed record 2: args.card.cvv" in confirmed.output
    result = cli(home, "verify")
    assert result.exit_code == 0, result.output
    assert "rests on that signature, not on its hash" in result.output


def test_a_version_1_record_is_masked_under_the_administrators_signature(
    home: Path, admin_key: Path
) -> None:
    v1_log(home, OLD_SAGA)
    with AgentKit(home=home, ids=SequentialIds()) as kit, kit.transaction("new"):
        pass  # version 2 records after the old ones: masking an old one is still an old one
    done = cli(home, "redact", "args.card.cvv", "--sign", str(admin_key))
    assert done.exit_code == 0, done.output
    assert f'"{CVV}"'.encode() not in (home / "log.jsonl").read_bytes()
    verified = cli(home, "verify")
    assert verified.exit_code == 0, verified.output
    assert cli(home, "replay", "old-1").exit_code == 0


DATA = st.dictionaries(
    st.sampled_from(["args", "result", "error", "cause", "tool", "ordinal", "a", "zz"]), JSON
)
"""Record data with any JSON values, committed or not (see ``test_seal_bytes.py``: the
one-pass forms must give the reference forms' bytes)."""


@settings(max_examples=300, deadline=None)
@given(data=DATA, keyed=st.booleans())
def test_any_value_seals_as_the_reference_does_and_round_trips(
    data: dict[str, Any], keyed: bool
) -> None:
    hashed, stored, salts = seal_forms(data)
    raw = (salts or "").encode()
    drawn = [raw[at : at + SALT_LEN] for at in range(0, len(raw), SALT_LEN)]
    pending = iter(drawn)
    reference = sealed_forms(data, lambda: next(pending))
    if reference is None:
        assert salts is None
        assert hashed == stored
    else:
        assert (hashed, stored, salts) == reference
        assert open_forms_fast(data, salts) == open_forms(data, salts)[:2] == (hashed, stored)
    chain = Chain(b"k" * 32 if keyed else None)
    record, line = chain.seal(Entry("step.done", "saga-1", data, 5), 7, GENESIS)
    read = parse_line(chain, line[:-1], 7, GENESIS)
    assert isinstance(read, Record)
    assert read == record
    assert read.data == data
    assert check_line_fast(chain, line[:-1], 7, GENESIS.encode()) == (7, record.hash.encode())
