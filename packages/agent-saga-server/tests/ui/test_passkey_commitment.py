"""What a passkey approval signs: every field of the request and the decision change the
challenge, and registration offers both ES256 and Ed25519 credentials."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from agent_saga_server.dashboard.passkeys import (
    Where,
    commitment,
    create_tables,
    registration_options,
)
from agent_saga_server.store.approvals import ApprovalRow
from agent_saga_server.store.db import open_database

REQUEST = ApprovalRow(
    id="apr-0123456789abcdef", origin="o", saga="s-1", ordinal=2, tool="bank.wire",
    semantics="irreversible", digest="ab" * 32, args={"amount": 9000}, rule="r", reason="r",
    approvers=["*"], quorum=1, requested_at=0.0, expires_at=1.0, status="pending",
    decided_at=None, outcome=None,
)  # fmt: skip


def test_the_challenge_commits_to_request_saga_step_digest_decision_and_nonce() -> None:
    base = commitment(REQUEST, "approve", "n1")
    assert len(base) == 32
    assert commitment(REQUEST, "approve", "n1") == base
    others = [
        commitment(dataclasses.replace(REQUEST, id="apr-fedcba9876543210"), "approve", "n1"),
        commitment(dataclasses.replace(REQUEST, saga="s-2"), "approve", "n1"),
        commitment(dataclasses.replace(REQUEST, ordinal=3), "approve", "n1"),
        commitment(dataclasses.replace(REQUEST, digest="cd" * 32), "approve", "n1"),
        commitment(REQUEST, "deny", "n1"),
        commitment(REQUEST, "approve", "n2"),
    ]
    assert base not in others
    assert len(set(others)) == len(others)


def test_registration_offers_es256_and_ed25519(tmp_path: Path) -> None:
    db = open_database(None, tmp_path)
    try:
        create_tables(db)
        offer = registration_options(
            db, Where("http://localhost:1", "localhost"), "ann", "code:0123456789abcdef"
        )
    finally:
        db.close()
    algorithms = {p["alg"] for p in offer["options"]["pubKeyCredParams"]}
    assert {-7, -8} <= algorithms  # ES256, EdDSA (Ed25519)
    assert offer["options"]["rp"]["id"] == "localhost"
