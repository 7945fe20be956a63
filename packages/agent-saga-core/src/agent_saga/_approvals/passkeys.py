"""Approvers' passkeys in the log: registering and revoking the keys passkey votes are checked with.

A passkey counts from its durable ``passkey.registered`` record (approver, credential id, COSE
public key, algorithm, relying-party id, origin) until a ``passkey.revoked`` record; both are
records of no saga, so the engine, ``submit_vote`` and certify all read the same registry from
the log, offline. A registration is checked before it is written (the COSE key decodes, is of
its stated algorithm, one of ES256, EdDSA/Ed25519 or RS256) and a credential id is registered
once: the same key again writes nothing, another key under the same id is refused.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from .._errors import ConfigurationError
from .._log.codec import JSONValue
from .._log.records import Entry
from .._log.store import LogStore
from ..proofs._passkey import (
    ALGORITHMS,
    EXTRA_MISSING,
    PASSKEY_REGISTERED,
    PASSKEY_REVOKED,
    PasskeyKey,
)
from .votes import _BOOKS

__all__ = ["PasskeyRegistration", "register_passkey", "revoke_passkey"]


@dataclass(frozen=True)
class PasskeyRegistration:
    """What :func:`register_passkey` did: ``written`` (a new record), or the key was already
    registered (``written`` false, ``problem`` None), or refused (``problem`` says why)."""

    written: bool
    problem: str | None


def _key_problem(key: PasskeyKey) -> str | None:
    try:
        from webauthn.helpers import base64url_to_bytes, decode_credential_public_key
        from webauthn.helpers.exceptions import WebAuthnException
    except ImportError:
        raise ConfigurationError(f"registering a passkey: {EXTRA_MISSING}") from None
    if key.alg not in ALGORITHMS:
        return f"unsupported passkey algorithm {key.alg} (ES256 -7, EdDSA -8, RS256 -257)"
    try:
        alg = int(decode_credential_public_key(base64url_to_bytes(key.public_key)).alg)
    except (WebAuthnException, ValueError, TypeError, KeyError, IndexError) as exc:
        return f"the passkey's public key does not decode: {exc}"[:300]
    if alg != key.alg:
        return f"the passkey's public key is of algorithm {alg}, not {key.alg}"
    return None


def register_passkey(
    store: LogStore, key: PasskeyKey, *, by: str, now: float | None = None
) -> PasskeyRegistration:
    """Log ``key`` as a registered passkey of ``key.approver`` (``by``: who vouches for it, e.g.
    the dashboard that verified the registration ceremony).

    When this returns with ``written``, the record is durable (appended with ``sync``).

    Raises:
        ConfigurationError: py_webauthn (the ``agent-saga[passkeys]`` extra) is missing.
    """
    problem = _key_problem(key)
    if problem is not None:
        return PasskeyRegistration(False, problem)
    at = time.time() if now is None else now
    with _BOOKS.lock:
        known = _BOOKS.current(store).keys.passkeys.keys.get(key.credential)
        if known is not None:
            same = known.to_data() == key.to_data()
            return PasskeyRegistration(False, None if same else "another key has this credential")
        data: dict[str, JSONValue] = {**key.to_data(), "by": by[:200], "at": at}
        store.append([Entry(PASSKEY_REGISTERED, None, data, int(at * 1000))], sync=True)
    return PasskeyRegistration(True, None)


def revoke_passkey(
    store: LogStore, credential: str, *, by: str, reason: str = "", now: float | None = None
) -> bool:
    """Log the revocation of a registered passkey (durable when this returns true); false when
    the log registers no such credential or has revoked it already."""
    at = time.time() if now is None else now
    with _BOOKS.lock:
        passkeys = _BOOKS.current(store).keys.passkeys
        if credential not in passkeys.keys or credential in passkeys.revoked:
            return False
        data: dict[str, JSONValue] = {
            "credential": credential, "by": by[:200], "reason": reason[:500], "at": at,
        }  # fmt: skip
        store.append([Entry(PASSKEY_REVOKED, None, data, int(at * 1000))], sync=True)
    return True
