"""The public proofs module: its names are pinned, and the package imports without crypto."""

from __future__ import annotations

import subprocess
import sys

import agent_saga.proofs

PROOFS_API = {
    "EMPTY_ROOT",
    "ChainError",
    "Checkpoint",
    "CheckpointError",
    "DisclosureError",
    "DisclosureReport",
    "Finding",
    "ForkError",
    "InvalidProofError",
    "MerkleTree",
    "NoteError",
    "NoteSigner",
    "NoteVerifier",
    "PasskeyKey",
    "PasskeyRegistry",
    "passkey_challenge",
    "webauthn_available",
    "ProofError",
    "RootMismatchError",
    "build_bundle",
    "certify_records",
    "check_extension",
    "check_record",
    "check_records",
    "leaf_hash",
    "node_hash",
    "open_checkpoint",
    "parse_checkpoint",
    "record_leaf",
    "root_from_consistency_proof",
    "root_from_inclusion_proof",
    "tree_of",
    "verify_bundle",
    "verify_certificate",
    "verify_consistency",
    "verify_inclusion",
}


def test_the_proofs_module_exports_exactly_its_documented_names() -> None:
    assert set(agent_saga.proofs.__all__) == PROOFS_API
    assert set(dir(agent_saga.proofs)) >= PROOFS_API  # listed before their first use too
    for name in PROOFS_API:
        assert getattr(agent_saga.proofs, name) is not None
    assert not hasattr(agent_saga.proofs, "certify_record")  # a near miss is no name


def test_importing_the_package_or_opening_a_kit_does_not_load_cryptography() -> None:
    probe = (
        "import sys, tempfile, agent_saga\n"
        "kit = agent_saga.AgentKit(home=tempfile.mkdtemp(), checkpoints=True)\n"
        "loaded = 'cryptography' in sys.modules\n"
        "kit.close()\n"
        "print(loaded, 'cryptography' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert result.stdout.split() == ["False", "False"]  # an empty log needs no checkpoint
