"""Selective disclosure: a bundle proves one saga's records, all of them and nothing else."""

from __future__ import annotations

import base64
import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from agent_saga import AgentKit, Kind, SagaRolledBack, SequentialIds, compensator, tool
from agent_saga.cli import main
from agent_saga.proofs._audit import prove
from agent_saga.proofs._disclosure import DisclosureError, verify_bundle
from agent_saga.proofs._note import NoteSigner, NoteVerifier
from agent_saga.proofs._signing import home_verifier
from click.testing import CliRunner
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

Bundle = dict[str, Any]


@compensator("disclose.refund")
def refund(result: str) -> None:
    if result == "ch_999":
        raise ConnectionError("payments API down")


@tool(compensate="disclose.refund")
def charge(cents: int) -> str:
    return f"ch_{cents}"


@tool(semantics="reversible")
def draft(text: str) -> str:
    return text


@pytest.fixture(scope="module")
def log_home(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A home with a committed saga, a rolled-back one and one whose refund failed."""
    home = tmp_path_factory.mktemp("disclosure") / "home"
    ids: dict[str, str] = {}
    with AgentKit(home=home, ids=SequentialIds()) as kit:
        with kit.transaction("paid") as saga:
            charge(100)
            draft("thanks")
            ids["committed"] = saga.id
        for name, cents in (("declined", 250), ("stuck", 999)):
            with pytest.raises(SagaRolledBack), kit.transaction(name) as saga:
                ids[name] = saga.id
                charge(cents)
                draft("sorry")
                raise RuntimeError("card declined")
        with kit.transaction("later"):
            draft("after")
    return home, ids


@pytest.fixture
def home(log_home: tuple[Path, dict[str, str]], tmp_path: Path) -> Path:
    target = tmp_path / "home"
    shutil.copytree(log_home[0], target)
    return target


@pytest.fixture
def ids(log_home: tuple[Path, dict[str, str]]) -> dict[str, str]:
    return log_home[1]


def key(home: Path) -> list[NoteVerifier]:
    verifier = home_verifier(home)
    assert verifier is not None
    return [verifier]


def test_a_bundle_verifies_offline_with_every_record_of_the_saga(
    home: Path, ids: dict[str, str]
) -> None:
    for saga_id in ids.values():
        bundle = prove(home, saga_id)
        verifiers = key(home)
        text = json.dumps(bundle)
        report = verify_bundle(text, verifiers)
        assert report.saga == saga_id
        assert [r.saga for r in report.records] == [saga_id] * len(report.records)
        assert report.records[0].kind == Kind.SAGA_BEGIN
        assert report.records[-1].kind == Kind.SAGA_END
        assert report.records[-1].data["records"] == len(report.records) - 1


def test_leaving_out_any_record_fails(home: Path, ids: dict[str, str]) -> None:
    bundle = prove(home, ids["stuck"])
    for index in range(len(bundle["records"])):
        partial = copy.deepcopy(bundle)
        del partial["records"][index]
        with pytest.raises(DisclosureError, match="does not verify"):
            verify_bundle(partial, key(home))


def test_leaving_out_the_failed_compensation_fails(home: Path, ids: dict[str, str]) -> None:
    bundle = prove(home, ids["stuck"])
    kinds = [entry["record"]["kind"] for entry in bundle["records"]]
    assert Kind.COMP_FAILED in kinds
    bundle["records"] = [e for e in bundle["records"] if e["record"]["kind"] != Kind.COMP_FAILED]
    with pytest.raises(DisclosureError, match="incomplete"):
        verify_bundle(bundle, key(home))


def test_adding_a_record_of_another_saga_fails(home: Path, ids: dict[str, str]) -> None:
    bundle = prove(home, ids["declined"])
    other = prove(home, ids["committed"])
    assert other["checkpoint"] == bundle["checkpoint"]  # both proofs are under one tree head
    intruder = other["records"][1]
    verify_bundle({**other, "records": other["records"]}, key(home))
    records = sorted([*bundle["records"], intruder], key=lambda entry: int(entry["record"]["seq"]))
    with pytest.raises(DisclosureError, match="belongs to saga"):
        verify_bundle({**bundle, "records": records}, key(home))


def test_swapping_in_a_record_of_another_saga_for_one_left_out_fails(
    home: Path, ids: dict[str, str]
) -> None:
    bundle = prove(home, ids["declined"])
    other = prove(home, ids["committed"])
    records = bundle["records"][:]
    records[1] = other["records"][1]
    records.sort(key=lambda entry: int(entry["record"]["seq"]))
    with pytest.raises(DisclosureError):
        verify_bundle({**bundle, "records": records}, key(home))


def flip(b64: str) -> str:
    raw = bytearray(base64.b64decode(b64))
    raw[7] ^= 0x10
    return base64.b64encode(bytes(raw)).decode()


@pytest.mark.parametrize(
    "mutation",
    [
        "data",
        "proof_bit",
        "proof_truncated",
        "proof_extended",
        "seq",
        "order",
        "duplicate",
        "checkpoint_size",
        "format",
    ],
)
def test_every_mutation_of_a_bundle_fails(home: Path, ids: dict[str, str], mutation: str) -> None:
    bundle = prove(home, ids["declined"])
    entries = bundle["records"]
    middle = entries[2]
    if mutation == "data":
        middle["record"]["data"]["ordinal"] = 7
    elif mutation == "proof_bit":
        middle["proof"][0] = flip(middle["proof"][0])
    elif mutation == "proof_truncated":
        middle["proof"].pop()
    elif mutation == "proof_extended":
        middle["proof"].append(middle["proof"][0])
    elif mutation == "seq":
        middle["record"]["seq"] += 1
    elif mutation == "order":
        entries[1], entries[2] = entries[2], entries[1]
    elif mutation == "duplicate":
        entries.insert(2, copy.deepcopy(middle))
    elif mutation == "checkpoint_size":
        lines = bundle["checkpoint"].split("\n")
        lines[1] = str(int(lines[1]) + 1)
        bundle["checkpoint"] = "\n".join(lines)
    elif mutation == "format":
        bundle["format"] = "agent-saga.disclosure/0"
    with pytest.raises(DisclosureError, match="does not verify"):
        verify_bundle(bundle, key(home))


def test_a_bundle_checked_with_another_key_fails(home: Path, ids: dict[str, str]) -> None:
    stranger = NoteSigner("stranger.example/log", Ed25519PrivateKey.generate()).verifier
    with pytest.raises(DisclosureError, match="no signature by a known key"):
        verify_bundle(prove(home, ids["committed"]), [stranger])


@pytest.mark.parametrize(
    "raw",
    [b"[" * 5000, b"{}", b'{"format": "agent-saga.disclosure/1", "a": 1, "a": 2}', b"\xff"],
)
def test_junk_bundles_are_refused_with_a_typed_error(home: Path, raw: bytes) -> None:
    with pytest.raises(DisclosureError):
        verify_bundle(raw, key(home))


def test_an_unfinished_saga_cannot_be_proven_complete(home: Path) -> None:
    with AgentKit(home=home) as kit:
        transaction = kit.transaction("open")
        saga = transaction.__enter__()
        charge(5)  # its intent is durable before the charge runs
        with pytest.raises(DisclosureError, match="has not ended"):
            prove(home, saga.id)
        transaction.__exit__(None, None, None)
    with pytest.raises(DisclosureError, match="no saga"):
        prove(home, "no-such-saga")


def test_the_cli_proves_and_verifies_without_the_log(
    home: Path, ids: dict[str, str], tmp_path: Path
) -> None:
    out = tmp_path / "bundle.json"
    runner = CliRunner()
    result = runner.invoke(main, ["--home", str(home), "prove", ids["stuck"], "-o", str(out)])
    assert result.exit_code == 0, result.output
    public = tmp_path / "log.pub"
    public.write_text(runner.invoke(main, ["--home", str(home), "keys"]).output)
    shutil.rmtree(home)  # the auditor has the bundle and the public key, nothing else
    checked = runner.invoke(main, ["verify-proof", str(out), "--key", str(public)])
    assert checked.exit_code == 0, checked.output
    assert "complete" in checked.output
    assert ids["stuck"] in checked.output
    bundle = json.loads(out.read_text())
    bundle["records"].pop(3)
    out.write_text(json.dumps(bundle))
    failed = runner.invoke(main, ["verify-proof", str(out), "--key", str(public)])
    assert failed.exit_code == 1
    assert "NOT VERIFIED" in failed.output
