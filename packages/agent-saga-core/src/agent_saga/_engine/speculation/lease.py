"""Leases: what lets the result of a step run ahead of confirmation count, once.

A lease is the text ``asl3.<kid>.<claims>.<mac>``: ``kid`` is the key id (16 hex digits),
``claims`` the base64url (no padding) of the packed claims, and ``mac`` the base64url of
``BLAKE2s-256(key=key[kid], person="asl3 mac")`` over the text ``asl3.<kid>.<claims>`` (keyed
BLAKE2s, RFC 7693, is a MAC as it stands). The packed claims are, big endian: the expiry
(milliseconds, exclusive; 8 bytes, signed), the ordinal of the step run ahead (8 bytes,
signed), a 128-bit nonce, the intent digest of that step (saga, ordinal, tool, idempotency key
and arguments; 32 bytes), the argument digest (``BLAKE2s-256(key=key[kid], person="asl3
arg")`` of the canonical arguments, so the lease does not let anyone test guesses of the
arguments offline; 32 bytes), the length of the saga id (2 bytes), the saga id and the tool
name (UTF-8, the tool taking the rest). The key id is bound by the MAC, which covers the text
before it.

An ``asl2`` lease (HMAC-SHA-256, the format before this one) is refused with its own reason: a
result run ahead is held by the process that ran it, so no ``asl2`` lease issued before an
upgrade could yield a result after it anyway (a restart discards it).

:func:`check` never raises and never accepts a lease that differs in any byte from one issued:
the text must be ASCII and at most ``MAX_LEASE`` characters, the MAC, recomputed over the exact
text before it and spelt in its one base64url form, equal to the one presented (compared in
constant time), the key still kept, and every claim equal to what the call presents. Claims are
unpacked only after the MAC holds, so they are, byte for byte, ones this key issued. A refusal
is a one-line reason.

The hot path (issue, then check) parses no JSON and keys no MAC: each key holds its BLAKE2s
states, keyed and personalized once, copied per MAC; digests are compared as bytes and turned
into hex once, for the claims returned.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import struct
from binascii import Error as BinasciiError
from binascii import a2b_base64, b2a_base64
from dataclasses import dataclass, field
from typing import NamedTuple

from ..._errors import ConfigurationError
from .keys import LEASE_FORMAT, LeaseKey, LeaseKeys

PREFIX = LEASE_FORMAT
RETIRED = "asl2."
"""How a lease of the retired HMAC-SHA-256 format begins."""
MAX_LEASE = 2048
_KID = re.compile(r"[0-9a-f]{16}")
_HEAD = struct.Struct(">qq80sH")
"""Expiry, ordinal, nonce + intent + argument digest (16 + 32 + 32 bytes), saga length."""
_MAC_TEXT = 43
"""Characters of a MAC's base64url text (32 bytes, unpadded)."""
_TO_URLSAFE = bytes.maketrans(b"+/", b"-_")
_FROM_URLSAFE = bytes.maketrans(b"-_", b"+/")
_INTENT_DOMAIN = b"agent-saga speculated intent v2\x00"
_new_tuple = tuple.__new__

__all__ = [
    "Lease",
    "LeaseClaims",
    "Refused",
    "args_digest",
    "check",
    "intent_digest",
    "issue",
    "lease_length",
]


class LeaseClaims(NamedTuple):
    """What a lease binds (see the module docstring); digests and nonce in lowercase hex."""

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
        """The packed claims (without the key id, which the lease text carries).

        Raises:
            ValueError: a digest or the nonce is not hex; struct.error: a number or the saga
                id does not fit its field.
        """
        saga = self.saga.encode("utf-8", "surrogatepass")
        digests = bytes.fromhex(self.nonce + self.intent + self.args)
        if len(digests) != 80:
            raise ValueError("a lease's nonce is 16 bytes and its digests 32 bytes each")
        head = _HEAD.pack(self.exp, self.ordinal, digests, len(saga))
        return head + saga + self.tool.encode("utf-8", "surrogatepass")


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
    """``raw`` in base64url without padding (its one spelling for a given length)."""
    return b2a_base64(raw, newline=False).translate(_TO_URLSAFE).rstrip(b"=").decode("ascii")


def _args_mac(key: LeaseKey, canonical_args: bytes) -> bytes:
    mac = key.args_mac.copy()
    mac.update(canonical_args)
    return mac.digest()


def args_digest(key: LeaseKey, canonical_args: bytes) -> str:
    """The argument digest a lease under ``key`` binds (hex)."""
    return _args_mac(key, canonical_args).hex()


def intent_digest(saga: str, ordinal: int, tool: str, idempotency_key: str, args: str) -> str:
    """The digest of the speculated step's intent: SHA-256 over its domain, the ordinal (8
    bytes) and each text field (saga, tool, idempotency key, argument digest) as 4 bytes of
    length and its UTF-8, so no two intents share an encoding."""
    digest = hashlib.sha256(_INTENT_DOMAIN)
    digest.update(ordinal.to_bytes(8, "big", signed=True))
    for text in (saga, tool, idempotency_key, args):
        raw = text.encode("utf-8", "surrogatepass")
        digest.update(len(raw).to_bytes(4, "big"))
        digest.update(raw)
    return digest.hexdigest()


def lease_length(saga: str, tool: str) -> int:
    """The length of the text of any lease for a step of ``saga`` running ``tool`` (a lease
    longer than ``MAX_LEASE`` would never hold, so such a step must not run ahead)."""
    packed = _HEAD.size + len(saga.encode("utf-8", "surrogatepass"))
    packed += len(tool.encode("utf-8", "surrogatepass"))
    return len(PREFIX) + 16 + (4 * packed + 2) // 3 + _MAC_TEXT + 3


def issue(key: LeaseKey, claims: LeaseClaims) -> str:
    """The lease text for ``claims`` under ``key`` (``claims.kid`` must be ``key.kid``)."""
    signed = key.lease_head + b2a_base64(claims.payload(), newline=False).translate(
        _TO_URLSAFE
    ).rstrip(b"=")
    mac = key.lease_mac.copy()  # inline, as in check: the hot path's frames are its cost
    mac.update(signed)
    tail = b2a_base64(mac.digest(), newline=False)[:_MAC_TEXT].translate(_TO_URLSAFE)
    return (signed + b"." + tail).decode("ascii")


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
    token = lease.token if isinstance(lease, Lease) else lease
    if type(token) is not str or not token.isascii() or len(token) > MAX_LEASE:
        return Refused(f"not a lease (text of at most {MAX_LEASE} ASCII characters)")
    parts = token.split(".")
    if len(parts) != 4 or parts[0] != PREFIX:
        if token.startswith(RETIRED):
            return Refused(f"an {RETIRED[:-1]} lease: that format is no longer accepted")
        return Refused(f"not a lease ({PREFIX}.<key id>.<claims>.<mac>)")
    kid = parts[1]
    try:
        key = keys.get(kid, now)
    except ConfigurationError as exc:  # a key file of the home that cannot be read
        return Refused(f"cannot read the lease keys: {exc}")
    if key is None:
        if _KID.fullmatch(kid) is None:
            return Refused(f"not a lease ({PREFIX}.<key id>.<claims>.<mac>)")
        return Refused(f"unknown or retired key id {kid}")
    # The MAC covers the exact text before it, and the one base64url spelling of the computed
    # MAC is compared with the text presented: equal text, never merely equal decoded bytes.
    mac = key.lease_mac.copy()
    mac.update(token[: len(token) - len(parts[3]) - 1].encode("ascii"))
    computed = b2a_base64(mac.digest(), newline=False)[:_MAC_TEXT].translate(_TO_URLSAFE)
    if not hmac.compare_digest(parts[3].encode("ascii"), computed):
        return Refused("forged or altered: its MAC does not verify")
    # Unpacked only now: the claims are, byte for byte, ones this key issued, so what follows
    # guards against a key that signed something else, never against a forgery.
    text = parts[2]
    try:
        raw = a2b_base64(text.encode("ascii").translate(_FROM_URLSAFE) + b"=" * (-len(text) % 4))
        exp, ordinal, digests, size = _HEAD.unpack_from(raw)
        at = _HEAD.size + size
        if at > len(raw):
            return Refused("malformed claims")
        claimed_saga = raw[_HEAD.size : at].decode("utf-8", "surrogatepass")
        claimed_tool = raw[at:].decode("utf-8", "surrogatepass")
    except (BinasciiError, struct.error, UnicodeDecodeError):
        return Refused("malformed claims")
    hexed = digests.hex()
    fields = (kid, claimed_saga, claimed_tool, ordinal, hexed[32:96], hexed[96:], exp, hexed[:32])
    claims: LeaseClaims = _new_tuple(LeaseClaims, fields)  # what LeaseClaims() does, no frame
    if int(now * 1000) >= exp:
        return Refused("expired", claims)
    if claimed_saga != saga:
        return Refused("issued for another saga", claims)
    if claimed_tool != tool:
        return Refused(f"issued for tool {claimed_tool!r}, not {tool!r}", claims)
    mac = key.args_mac.copy()
    mac.update(canonical_args)
    if not hmac.compare_digest(digests[48:], mac.digest()):
        return Refused("issued for other arguments", claims)
    return claims
