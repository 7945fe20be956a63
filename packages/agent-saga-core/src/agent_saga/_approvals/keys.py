"""Approver keys: who may sign votes as whom, and who may say so.

A key is registered (``approver.key_added``) or revoked (``approver.key_revoked``) by a record
that must carry its authority, or it is ignored by everyone who counts votes:

- ``"authority": "admin"``: signed by a trusted administrator key (``admin_keys``, configured
  outside the home; see :mod:`agent_saga._log.admins`);
- ``"authority": "approver"``: signed by a key already registered, and not revoked, for the same
  approver (rotating one's own key, or revoking it).

The signature covers :func:`key_message`: the action, the approver, the key, a fresh nonce and
the log it is meant for (the hash of its first record, or the genesis hash while the log is
empty), so a registration cannot be replayed after a revocation or into another log. Writing to
the home is therefore not enough to make a key count: an attempt without authority is ignored,
and the CLI logs it as ``approver.key_refused``.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._errors import AgentSagaError
from .._log.admins import admin_id, trusted_admin_keys, verify_signature
from .._log.codec import JSONValue, canonical
from .._log.records import GENESIS, Kind, Record
from ..proofs._note import NoteError, NoteVerifier
from ..proofs._passkey import PasskeyRegistry

__all__ = ["ApproverKeys", "KeyGrant", "key_message"]

KEY_ADDED = Kind.KEY_ADDED
KEY_REVOKED = Kind.KEY_REVOKED
_PREFIX = b"agent-saga approver key v1\x00"


def key_message(action: str, approver: str, key: str, nonce: str, log: str) -> bytes:
    """The bytes an administrator (or the approver's current key) signs to add or revoke
    ``key`` for ``approver`` in the log whose first record has hash ``log``."""
    fields = {"action": action, "approver": approver, "key": key, "log": log, "nonce": nonce}
    return _PREFIX + canonical(fields)


@dataclass(frozen=True)
class KeyGrant:
    """The authority fields of a key record (what :meth:`ApproverKeys.take` checks)."""

    authority: str
    signer: str
    """The administrator's id (``admin``) or the approver's current verifier key (``approver``)."""
    nonce: str
    signature: str

    def to_data(self) -> dict[str, JSONValue]:
        return {
            "authority": self.authority,
            "signer": self.signer,
            "nonce": self.nonce,
            "signature": self.signature,
        }


def _signature(text: object) -> bytes | None:
    if not isinstance(text, str):
        return None
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        return None
    return raw if len(raw) == 64 else None


@dataclass
class ApproverKeys:
    """Registered Ed25519 keys per approver id (``key id`` -> verifier), revocations applied.

    Only records that carry their authority change it (see the module docstring); the others
    are listed in :attr:`refused`.
    """

    keys: dict[str, NoteVerifier] = field(default_factory=dict)
    owners: dict[str, str] = field(default_factory=dict)
    revoked: set[str] = field(default_factory=set)
    refused: list[tuple[int, str]] = field(default_factory=list)
    """``(seq, why)`` of key records that were ignored."""
    admins: Callable[[], frozenset[bytes]] = trusted_admin_keys
    log: str = GENESIS
    """The hash of the log's first record, once seen."""
    passkeys: PasskeyRegistry = field(default_factory=PasskeyRegistry)
    """Approvers' registered passkeys (``passkey.registered`` / ``passkey.revoked``)."""
    _nonces: set[str] = field(default_factory=set)
    _trusted: frozenset[bytes] | None = None

    def copy(self) -> ApproverKeys:
        """An independent copy (verifiers are immutable and shared): taking records into it
        leaves these keys as they are."""
        return ApproverKeys(
            keys=dict(self.keys),
            owners=dict(self.owners),
            revoked=set(self.revoked),
            refused=list(self.refused),
            admins=self.admins,
            log=self.log,
            passkeys=self.passkeys.copy(),
            _nonces=set(self._nonces),
            _trusted=self._trusted,
        )

    def add(self, approver: str, key_text: str) -> str | None:
        """Register without any check (for tests and tools that verified it themselves)."""
        try:
            verifier = NoteVerifier.parse(key_text)
        except NoteError:
            return None
        key_id = verifier.encode()
        self.keys[key_id] = verifier
        self.owners[key_id] = approver
        self.revoked.discard(key_id)
        return key_id

    def active(self, approver: str) -> list[NoteVerifier]:
        return [
            v
            for key_id, v in self.keys.items()
            if self.owners[key_id] == approver and key_id not in self.revoked
        ]

    def take(self, record: Record) -> None:
        """Apply one ``approver.key_added`` / ``approver.key_revoked`` record, if authorized."""
        if record.seq == 1:
            self.log = record.hash
        data = record.data
        if record.kind == KEY_ADDED:
            approver, key_text, action = str(data.get("approver")), str(data.get("key")), "add"
        elif record.kind == KEY_REVOKED:
            key_text, action = str(data.get("key")), "revoke"
            approver = self.owners.get(key_text, "")
        else:
            return
        problem = self.check(action, approver, key_text, data, GENESIS if record.seq == 1 else None)
        if problem is not None:
            self.refused.append((record.seq, problem))
        elif action == "add":
            self.add(approver, key_text)
        else:
            self.revoked.add(key_text)

    def check(
        self,
        action: str,
        approver: str,
        key_text: str,
        data: Mapping[str, Any],
        log: str | None = None,
    ) -> str | None:
        """Why a key record with ``data`` does not count (``None``: it does)."""
        if action == "revoke" and not approver:
            return "revokes a key that is not registered"
        nonce, signer, authority = data.get("nonce"), data.get("signer"), data.get("authority")
        signature = _signature(data.get("signature"))
        if signature is None or not isinstance(nonce, str) or not isinstance(signer, str):
            return f"no administrator's or approver's signature on this {action} of a key"
        if nonce in self._nonces:
            return "replayed key record (its nonce was used before)"
        message = key_message(action, approver, key_text, nonce, log or self.log)
        if authority == "admin":
            problem = self._check_admin(signer, message, signature)
        elif authority == "approver":
            problem = self._check_own(approver, signer, message, signature)
        else:
            problem = f"unknown authority {authority!r}"
        if problem is None:
            self._nonces.add(nonce)
        return problem

    def trust_changed(self) -> bool:
        """Whether the administrator keys trusted now differ from those key records were
        judged with so far (or can no longer be read): what was accepted must be judged again."""
        if self._trusted is None:
            return False
        try:
            return self.admins() != self._trusted
        except AgentSagaError:
            return True

    def _check_admin(self, signer: str, message: bytes, signature: bytes) -> str | None:
        if self._trusted is None:
            try:
                self._trusted = self.admins()
            except AgentSagaError as exc:
                return f"administrator keys cannot be read: {exc}"
        public = next((k for k in self._trusted if admin_id(k) == signer), None)
        if public is None:
            return "signed by a key that is not a trusted administrator key"
        if not verify_signature(public, message, signature):
            return "the administrator's signature does not verify"
        return None

    def _check_own(
        self, approver: str, signer: str, message: bytes, signature: bytes
    ) -> str | None:
        current = [v for v in self.active(approver) if v.encode() == signer]
        if not current:
            return f"signed by a key that is not a current key of {approver}"
        if not current[0].verify(message, signature):
            return f"the signature of {approver}'s current key does not verify"
        return None
