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
    with AgentKit(home=home, ids=SequentialIds()) as kit:
        with pytest.raises(SagaRolledBack), kit.transaction("order"):
            charge(500)
            raise RuntimeError("card declined")
    assert cli(home, "checkpoint").exit_code == 0
    saved = tmp_path / "saved.note"
    shutil.copy(home / "checkpoints" / "latest.note", saved)
    listed = cli(home, "sagas")
    assert listed.exit_code == 0 and "needs_human" in listed.output
    return home, saved


def forge(home: Path) -> None:
    """The attack, done by hand on the log file: no library code of ours is used."""
    objects = [json.loads(line) for line in lines_of(home)]
    entries = []
    for obj in objects:
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
        "v": 1,
    }
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
