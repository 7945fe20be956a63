"""Proofs about the log, for auditors and for tools: Merkle proofs, checkpoints, disclosures.

Everything here works offline on bytes and keys; nothing opens a log for writing.

* RFC 9162 Merkle trees: :class:`MerkleTree` (incremental; roots and proofs for any past size),
  :func:`leaf_hash`, :func:`node_hash`, :func:`verify_inclusion`, :func:`verify_consistency`,
  :func:`root_from_inclusion_proof`, :func:`root_from_consistency_proof`, with the errors
  :class:`ProofError`, :class:`InvalidProofError` and :class:`RootMismatchError`.
* The log's tree: leaf ``seq - 1`` is :func:`record_leaf` of record ``seq``; :func:`tree_of`.
* Signed checkpoints (C2SP tlog-checkpoint in a signed note): :class:`Checkpoint`,
  :func:`open_checkpoint`, :func:`check_extension` (:class:`ForkError` for a rewritten or
  forked log), and the keys :class:`NoteVerifier` / :class:`NoteSigner`.
* Disclosure bundles: :func:`build_bundle` and :func:`verify_bundle` (:class:`DisclosureError`).
* certify: :func:`certify_records` (the findings over records read elsewhere) and
  :func:`verify_certificate`.
* Passkey (WebAuthn) approvals checked offline: :func:`passkey_challenge` (what a passkey
  signs), :class:`PasskeyKey` and :class:`PasskeyRegistry` (the log's registered passkeys),
  :func:`webauthn_available` (the ``agent-saga[passkeys]`` extra); certify checks every passkey
  vote of a log.
* Records received from another process: :func:`check_record`, :func:`check_records` for a
  batch (:class:`ChainError`).
* Offline devices' logs merged once each device's key, chain and checkpoints vouch for them
  (the private ``_mesh``, public as ``agent_saga.merge_logs``, ``merged_view`` and
  ``certify_merged``); a merge writes only its mesh directory.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._certify import Finding, certify_records, verify_certificate
    from ._checkpoint import (
        Checkpoint,
        CheckpointError,
        ForkError,
        check_extension,
        open_checkpoint,
        parse_checkpoint,
    )
    from ._disclosure import DisclosureError, DisclosureReport, build_bundle, verify_bundle
    from ._logtree import record_leaf, tree_of
    from ._merkle import (
        EMPTY_ROOT,
        InvalidProofError,
        ProofError,
        RootMismatchError,
        leaf_hash,
        node_hash,
        root_from_consistency_proof,
        root_from_inclusion_proof,
        verify_consistency,
        verify_inclusion,
    )
    from ._note import NoteError, NoteSigner, NoteVerifier
    from ._passkey import PasskeyKey, PasskeyRegistry, passkey_challenge, webauthn_available
    from ._received import ChainError, check_record, check_records
    from ._tree import MerkleTree

_SOURCES: dict[str, str] = {
    "ChainError": "._received",
    "Checkpoint": "._checkpoint",
    "CheckpointError": "._checkpoint",
    "DisclosureError": "._disclosure",
    "DisclosureReport": "._disclosure",
    "EMPTY_ROOT": "._merkle",
    "Finding": "._certify",
    "ForkError": "._checkpoint",
    "InvalidProofError": "._merkle",
    "MerkleTree": "._tree",
    "NoteError": "._note",
    "NoteSigner": "._note",
    "NoteVerifier": "._note",
    "PasskeyKey": "._passkey",
    "PasskeyRegistry": "._passkey",
    "ProofError": "._merkle",
    "RootMismatchError": "._merkle",
    "build_bundle": "._disclosure",
    "certify_records": "._certify",
    "check_extension": "._checkpoint",
    "check_record": "._received",
    "check_records": "._received",
    "leaf_hash": "._merkle",
    "node_hash": "._merkle",
    "open_checkpoint": "._checkpoint",
    "parse_checkpoint": "._checkpoint",
    "passkey_challenge": "._passkey",
    "record_leaf": "._logtree",
    "root_from_consistency_proof": "._merkle",
    "root_from_inclusion_proof": "._merkle",
    "tree_of": "._logtree",
    "verify_bundle": "._disclosure",
    "verify_certificate": "._certify",
    "verify_consistency": "._merkle",
    "verify_inclusion": "._merkle",
    "webauthn_available": "._passkey",
}
"""Where each public name lives: the submodule is imported at the name's first use, so that
opening a kit (which needs two of them) does not import them all."""


if not TYPE_CHECKING:  # type checkers see the imports above, and so refuse a misspelled name

    def __getattr__(name: str) -> Any:
        """The public name ``name``, imported from its submodule at first use."""
        source = _SOURCES.get(name)
        if source is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(import_module(source, __name__), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    """The module's names, the public ones included before their first use."""
    return sorted({*globals(), *_SOURCES})


__all__ = [
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
    "passkey_challenge",
    "record_leaf",
    "root_from_consistency_proof",
    "root_from_inclusion_proof",
    "tree_of",
    "verify_bundle",
    "verify_certificate",
    "verify_consistency",
    "verify_inclusion",
    "webauthn_available",
]
