"""Issue 15, point 2: a redaction cannot rewrite history.

The attacker can write the home (and so holds the home's checkpoint key) but not the
administrator key. They turn a ``needs_human`` saga into a ``rolled_back`` one: its
``compensation.failed`` record becomes ``compensation.done`` (kind included) and its
``saga.end`` says ``rolled_back``; each changed record carries a redaction marker and keeps its
stored hash, and one appended ``log.redaction`` record names them with hand-computed digests.
Every command must refuse the result: ``verify --since`` a checkpoint saved before,
``certify``, ``sagas``, ``replay`` and ``verify-proof`` (on a bundle the attacker signs with the
home's own key).
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from agent_saga import AgentKit, SagaRolledBack, SequentialIds, compensator, tool
from agent_saga.cli import main
from agent_saga.proofs._checkpoint import Checkpoint
from agent_saga.proofs._merkle import leaf_hash
from agent_saga.proofs._signing import home_signer
from agent_saga.proofs._tree import MerkleTree
from click.testing import CliRunner, Result
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

SAGA = "saga-0001"


@compensator("forgery.refund")
def refund(result: str) -> None:
    raise RuntimeError("the bank is down")


@tool(name="forgery.charge", compensate="forgery.refund")
def charge(cents: int) -> str:
    return f"ch_{cents}"


def cli(home: Path, *args: str) -> Result:
    return CliRunner().invoke(main, ["--home", str(home), *args])


def canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def lines_of(home: Path) -> list[bytes]:
    return (home / "log.jsonl").read_bytes().rstrip(b"\x00").splitlines()


@pytest.fixture
def needs_human(home: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A home whose one saga needs a human, and a checkpoint of it saved outside the home."""
    with (
        AgentKit(home=home, ids=SequentialIds()) as kit,
        pytest.raises(SagaRolledBack),
        kit.transaction("order"),
    ):
        charge(500)
        raise RuntimeError("card declined")
    assert cli(home, "checkpoint").exit_code == 0
    saved = tmp_path / "saved.note"
    shutil.copy(home / "checkpoints" / "latest.note", saved)
    listed = cli(home, "sagas")
    assert listed.exit_code == 0
    assert "needs_human" in listed.output
    return home, saved


def forge(home: Path, *, downgrade: bool = False, sign: Ed25519PrivateKey | None = None) -> None:
    """The attack, done by hand on the log file: no library code of ours is used.

    ``downgrade`` also rewrites each changed record as a version 1 record (no salts), whose
    hash is not expected to match once masked; ``sign`` signs the appended statement with the
    attacker's own key, in the format an administrator's would have.
    """
    objects = [json.loads(line) for line in lines_of(home)]
    entries = []
    for obj in objects:
        if obj["kind"] in ("compensation.failed", "saga.end") and downgrade:
            obj["v"] = 1
            obj.pop("salts", None)
        if obj["kind"] == "compensation.failed":
            obj["kind"] = "compensation.done"
            obj["data"] = {
                "ordinal": obj["data"]["ordinal"],
                "tool": obj["data"]["tool"],
                "error": {"$redacted": "later"},
            }
        elif obj["kind"] == "saga.end":
            obj["data"]["status"] = "rolled_back"
            obj["data"]["compensated"], obj["data"]["failed"] = [1], []
            obj["data"]["cause"] = {"$redacted": "later"}
        else:
            continue
        line = canonical(obj)  # the stored hash is kept: the record claims to be masked
        digest = hashlib.sha256(b"agent-saga redacted record v1\n" + line).hexdigest()
        entries.append({"seq": obj["seq"], "paths": ["error"], "digest": digest})
    assert len(entries) == 2
    last = objects[-1]
    statement: dict[str, Any] = {
        "data": {"records": entries, "path": "error", "reason": "PII"},
        "kind": "log.redaction",
        "prev": last["hash"],
        "saga": None,
        "seq": last["seq"] + 1,
        "ts": last["ts"] + 1,
        "v": 1 if sign is None else 2,
    }
    if sign is not None:
        from agent_saga._log.ledger import statement_message

        data = statement["data"]
        data["admin"] = base64.b64encode(sign.public_key().public_bytes_raw()).decode()
        message = statement_message(statement["seq"], last["hash"], data)
        data["signature"] = base64.b64encode(sign.sign(message)).decode()
    body = canonical(statement)
    statement["hash"] = hashlib.sha256(bytes.fromhex(last["hash"]) + body).hexdigest()
    lines = [canonical(obj) for obj in objects] + [canonical(statement)]
    (home / "log.jsonl").write_bytes(b"\n".join(lines) + b"\n")


def forged_bundle(home: Path, out: Path) -> None:
    """What the attacker can publish: the saga's forged records and the forged redaction,
    proven under a checkpoint they sign with the home's own key (it is in the home)."""
    objects = [json.loads(line) for line in lines_of(home)]
    tree = MerkleTree.from_leaf_hashes(leaf_hash(bytes.fromhex(o["hash"])) for o in objects)
    signer = home_signer(home)
    checkpoint = Checkpoint(signer.name, tree.size, tree.root()).sign(signer)

    def proven(obj: dict[str, Any]) -> dict[str, Any]:
        proof = tree.inclusion_proof(obj["seq"] - 1, tree.size)
        return {"record": obj, "proof": [base64.b64encode(h).decode() for h in proof]}

    bundle = {
        "format": "agent-saga.disclosure/1",
        "saga": SAGA,
        "checkpoint": checkpoint.note,
        "records": [proven(o) for o in objects if o["saga"] == SAGA],
        "redactions": [proven(o) for o in objects if o["kind"] == "log.redaction"],
    }
    out.write_text(json.dumps(bundle))


def test_a_forged_redaction_fails_every_command(
    needs_human: tuple[Path, Path], tmp_path: Path
) -> None:
    home, saved = needs_human
    forge(home)
    since = cli(home, "verify", "--since", str(saved))
    assert since.exit_code == 1, since.output
    certified = cli(home, "certify")
    assert certified.exit_code == 1, certified.output
    listed = cli(home, "sagas")
    assert listed.exit_code != 0, listed.output
    assert "rolled_back" not in listed.output
    replayed = cli(home, "replay", SAGA)
    assert replayed.exit_code != 0, replayed.output
    bundle = tmp_path / "bundle.json"
    forged_bundle(home, bundle)
    public = (home / "keys" / "checkpoint.pub").read_text().strip()
    checked = cli(home, "verify-proof", str(bundle), "--key", public)
    assert checked.exit_code == 1, checked.output
    assert "NOT VERIFIED" in checked.output


def refused_everywhere(home: Path, saved: Path, tmp_path: Path) -> list[str]:
    """Each command's last line; asserts that every one of them refused the log."""
    outputs = []
    for args in (["verify", "--since", str(saved)], ["certify"], ["sagas"], ["replay", SAGA]):
        result = cli(home, *args)
        assert result.exit_code != 0, (args, result.output)
        assert "rolled_back" not in result.output
        outputs.append((result.output.strip().splitlines() or [""])[-1])
    bundle = tmp_path / "bundle.json"
    forged_bundle(home, bundle)
    public = (home / "keys" / "checkpoint.pub").read_text().strip()
    checked = cli(home, "verify-proof", str(bundle), "--key", public)
    assert checked.exit_code == 1, checked.output
    outputs.append(checked.output.strip())
    return outputs


@pytest.mark.parametrize("variant", ["downgraded", "self_signed", "kind_only"])
def test_an_attacker_who_knows_the_new_format_still_fails(
    needs_human: tuple[Path, Path], tmp_path: Path, admin_key: Path, variant: str
) -> None:
    """With an administrator key trusted (not the attacker's): version 1 records faked in the
    middle of a version 2 log, a statement signed with the attacker's own key, or just the
    kind changed in place."""
    home, saved = needs_human
    if variant == "kind_only":
        log = home / "log.jsonl"
        raw = log.read_bytes()
        assert raw.count(b'"kind":"compensation.failed"') == 1
        log.write_bytes(raw.replace(b'"kind":"compensation.failed"', b'"kind":"compensation.done"'))
        expected = "hash does not match"
    elif variant == "downgraded":
        forge(home, downgrade=True)
        expected = "not signed by an administrator key"
    else:
        forge(home, downgrade=True, sign=Ed25519PrivateKey.generate())
        expected = "not a trusted administrator key"
    outputs = refused_everywhere(home, saved, tmp_path)
    assert any(expected in line for line in outputs), outputs


def test_an_administrators_redaction_passes_every_command(
    needs_human: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The honest path, with the administrator key configured outside the home: masking the
    error message changes nothing else, and the saga still needs a human everywhere."""
    home, saved = needs_human
    ops = tmp_path / "ops"
    keys = ops / "keys"
    keys.mkdir(parents=True)
    assert cli(home, "keys", "new", str(keys / "admin.key")).exit_code == 0
    (ops / "agent-saga.toml").write_text('admin_keys = ["keys/admin.key.pub"]\n')
    monkeypatch.chdir(ops)
    done = cli(home, "redact", "error.message", "--sign", str(keys / "admin.key"))
    assert done.exit_code == 0, done.output
    assert b"the bank is down" not in (home / "log.jsonl").read_bytes()
    verified = cli(home, "verify", "--since", str(saved))
    assert verified.exit_code == 0, verified.output
    assert "the rest of it is still checked by its hash" in verified.output
    assert cli(home, "certify").exit_code == 1  # it still needs a human, and says so
    listed = cli(home, "sagas")
    assert listed.exit_code == 0
    assert "needs_human" in listed.output
    assert cli(home, "replay", SAGA).exit_code == 0
    assert cli(home, "prove", SAGA, "-o", str(tmp_path / "b.json")).exit_code == 0
    public = (home / "keys" / "checkpoint.pub").read_text().strip()
    assert cli(home, "verify-proof", str(tmp_path / "b.json"), "--key", public).exit_code == 0
    # Elsewhere, with no administrator key configured, the same log is refused, and an
    # auditor can name the key to trust on the command line instead.
    monkeypatch.chdir(tmp_path)
    untrusted = cli(home, "verify")
    assert untrusted.exit_code == 1
    assert "not a trusted administrator key" in untrusted.output
    given = cli(home, "verify", "--admin-key", str(keys / "admin.key.pub"))
    assert given.exit_code == 0, given.output


def test_a_statement_cannot_be_moved_to_another_place(
    needs_human: tuple[Path, Path], admin_key: Path
) -> None:
    """A genuine signed statement is bound to its own seq and prev."""
    home, _ = needs_human
    assert cli(home, "redact", "error.message", "--sign", str(admin_key)).exit_code == 0
    lines = lines_of(home)
    statement = json.loads(lines[-1])
    lines = lines[:-1]
    last = json.loads(lines[-1])
    filler = {"data": {"note": "x"}, "kind": "note", "prev": last["hash"], "saga": None,
              "seq": last["seq"] + 1, "ts": last["ts"], "v": 2}  # fmt: skip
    filler["hash"] = hashlib.sha256(bytes.fromhex(last["hash"]) + canonical(filler)).hexdigest()
    statement.update(prev=filler["hash"], seq=filler["seq"] + 1)
    del statement["hash"]
    statement["hash"] = hashlib.sha256(
        bytes.fromhex(filler["hash"]) + canonical(statement)
    ).hexdigest()
    lines += [canonical(filler), canonical(statement)]
    (home / "log.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    result = cli(home, "verify")
    assert result.exit_code == 1
    assert "signature does not verify" in result.output


def test_even_an_administrator_cannot_rewrite_a_version_2_record(
    needs_human: tuple[Path, Path], tmp_path: Path, admin_key: Path
) -> None:
    """A version 1 record masked in place rests on its signature alone, so a record written
    as version 2 (after which the log holds no honest version 1 record) cannot be passed off
    as one: the same forgery, signed by the trusted administrator key, still fails."""
    from cryptography.hazmat.primitives import serialization

    home, saved = needs_human
    key = serialization.load_pem_private_key(admin_key.read_bytes(), password=None)
    assert isinstance(key, Ed25519PrivateKey)
    forge(home, downgrade=True, sign=key)
    outputs = refused_everywhere(home, saved, tmp_path)
    assert any("version 1 record masked in place after version 2" in o for o in outputs), outputs
