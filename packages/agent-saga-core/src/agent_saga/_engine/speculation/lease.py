"""Leases: what lets the result of a step run ahead of confirmation count, once.

A lease is the text ``asl1.<kid>.<payload>.<mac>``: ``kid`` is the key id (16 hex digits),
``payload`` the base64url (no padding) of the canonical JSON of its claims, and ``mac`` the
base64url of ``HMAC-SHA-256(key[kid], "agent-saga lease v1" NUL "asl1.<kid>.<payload>")``. The
claims bind the intent digest of the step run ahead (saga, ordinal, tool, idempotency key and
arguments), the tool, the argument digest (an HMAC under the same key of the canonical
arguments, so the lease does not let anyone test guesses of the arguments offline), the saga,
the expiry (milliseconds, exclusive), a 128-bit nonce and the key id.

:func:`check` never raises and never accepts a lease that differs in any byte from one issued:
the text must be ASCII and at most ``MAX_LEASE`` characters, every part in its one canonical
form, the MAC equal (compared in constant time, as bytes), the key still kept, and every claim
equal to what the call presents. A refusal is a one-line reason.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from dataclasses import dataclass, field
from json.encoder import encode_basestring as _quote  # C-accelerated; keeps non-ASCII
from typing import Any, NamedTuple

from ..._log.codec import canonical
from .keys import LeaseKey, LeaseKeys

PREFIX = "asl1"
MAX_LEASE = 2048
_DOMAIN = b"agent-saga lease v1\x00"
_ARGS_DOMAIN = b"agent-saga lease arguments v1\x00"
_KID = re.compile(r"[0-9a-f]{16}")
_decode = json.JSONDecoder().decode
_FIELDS = frozenset({"v", "kid", "saga", "tool", "ordinal", "intent", "args", "exp", "nonce"})

__all__ = ["Lease", "LeaseClaims", "Refused", "args_digest", "check", "intent_digest", "issue"]


class LeaseClaims(NamedTuple):
    """What a lease binds (see the module docstring)."""

    kid: str
    saga: str
    tool: str
    ordinal: int
    intent: str
    args: str
    exp: int
    """Milliseconds since the epoch; the lease is valid strictly before it."""
    nonce: str

    def payload(self) -> bytes:
        """The claims as canonical JSON (keys sorted, compact, UTF-8)."""
        return (
            f'{{"args":"{self.args}","exp":{self.exp},"intent":"{self.intent}",'
            f'"kid":"{self.kid}","nonce":"{self.nonce}","ordinal":{self.ordinal},'
            f'"saga":{_quote(self.saga)},"tool":{_quote(self.tool)},"v":1}}'
        ).encode()


@dataclass(frozen=True)
class Lease:
    """A speculated step's lease, as :meth:`AgentKit.speculate` returns it.

    ``str(lease)`` is its text (what :meth:`AgentKit.redeem` takes). ``expires`` is in seconds
    since the epoch, on the kit's clock.
    """

    token: str = field(repr=False)
    saga: str
    tool: str
    ordinal: int
    key_id: str
    expires: float
    nonce: str

    def __str__(self) -> str:
        return self.token


class Refused(NamedTuple):
    """Why a lease does not hold; ``claims`` when its MAC verified (so they are its issuer's)."""

    reason: str
    claims: LeaseClaims | None = None


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _mac(key: LeaseKey, signed: str) -> str:
    """The MAC of the text before the last dot, as its base64url text."""
    return _b64(hmac.digest(key.secret, _DOMAIN + signed.encode("ascii"), "sha256"))


def args_digest(key: LeaseKey, canonical_args: bytes) -> str:
    """The argument digest a lease under ``key`` binds."""
    return hmac.digest(key.secret, _ARGS_DOMAIN + canonical_args, "sha256").hex()


def intent_digest(saga: str, ordinal: int, tool: str, idempotency_key: str, args: str) -> str:
    """The digest of the speculated step's intent."""
    body = canonical(
        {"saga": saga, "ordinal": ordinal, "tool": tool, "key": idempotency_key, "args": args}
    )
    return hashlib.sha256(b"agent-saga speculated intent v1\x00" + body).hexdigest()


def issue(key: LeaseKey, claims: LeaseClaims) -> str:
    """The lease text for ``claims`` under ``key`` (``claims.kid`` must be ``key.kid``)."""
    signed = f"{PREFIX}.{key.kid}.{_b64(claims.payload())}"
    return f"{signed}.{_mac(key, signed)}"


def _claims(payload: bytes) -> LeaseClaims | None:
    """The claims of a payload whose MAC verified (so it is, byte for byte, one we issued:
    the checks here are for a key that signed something else, never for a forgery)."""
    try:
        obj: Any = _decode(payload.decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    if type(obj) is not dict or obj.keys() != _FIELDS or obj["v"] != 1:
        return None
    if not (
        type(obj["kid"]) is str
        and type(obj["saga"]) is str
        and type(obj["tool"]) is str
        and type(obj["intent"]) is str
        and type(obj["args"]) is str
        and type(obj["nonce"]) is str
        and type(obj["ordinal"]) is int
        and type(obj["exp"]) is int
    ):
        return None
    return LeaseClaims(
        obj["kid"],
        obj["saga"],
        obj["tool"],
        obj["ordinal"],
        obj["intent"],
        obj["args"],
        obj["exp"],
        obj["nonce"],
    )


def check(
    lease: object,
    keys: LeaseKeys,
    now: float,
    *,
    saga: str,
    tool: str,
    canonical_args: bytes,
) -> LeaseClaims | Refused:
    """The lease's claims when it holds for this call, else why not (one line)."""
    token = str(lease) if isinstance(lease, Lease) else lease
    if not isinstance(token, str) or not token.isascii() or len(token) > MAX_LEASE:
        return Refused(f"not a lease (text of at most {MAX_LEASE} ASCII characters)")
    parts = token.split(".")
    if len(parts) != 4 or parts[0] != PREFIX or not _KID.fullmatch(parts[1]):
        return Refused("not a lease (asl1.<key id>.<claims>.<mac>)")
    key = keys.get(parts[1], now)
    if key is None:
        return Refused(f"unknown or retired key id {parts[1]}")
    # The MAC covers the exact text before it, so equal base64url text means equal bytes in
    # their one canonical spelling; both are ASCII, compared in constant time.
    if not hmac.compare_digest(parts[3], _mac(key, f"{PREFIX}.{parts[1]}.{parts[2]}")):
        return Refused("forged or altered: its MAC does not verify")
    try:
        payload = base64.urlsafe_b64decode(parts[2] + "=" * (-len(parts[2]) % 4))
    except (binascii.Error, ValueError):
        return Refused("malformed claims")
    claims = _claims(payload)
    if claims is None or claims.kid != parts[1]:
        return Refused("malformed claims")
    if int(now * 1000) >= claims.exp:
        return Refused("expired", claims)
    if claims.saga != saga:
        return Refused("issued for another saga", claims)
    if claims.tool != tool:
        return Refused(f"issued for tool {claims.tool!r}, not {tool!r}", claims)
    if not hmac.compare_digest(claims.args, args_digest(key, canonical_args)):
        return Refused("issued for other arguments", claims)
    return claims
