"""A software passkey for tests: real WebAuthn assertions (authenticator data, client data JSON,
signature) made with ``cryptography``, ES256 or Ed25519, for the checks the engine and certify
run through py_webauthn. Nothing here verifies anything."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import struct
from typing import Any

import cbor2
from agent_saga._approvals.request import ApprovalRequest
from agent_saga.proofs import PasskeyKey, passkey_challenge
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

ORIGIN = "http://localhost:8765"
RP_ID = "localhost"
UP_UV = 0x05
"""Authenticator data flags: user present and user verified."""


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


class SoftPasskey:
    """One credential of ``approver``: ``alg`` is ``"ES256"`` or ``"Ed25519"``."""

    def __init__(self, approver: str, alg: str = "ES256") -> None:
        self.approver = approver
        self.alg = alg
        self.credential = b64url(os.urandom(16))
        self.count = 0
        if alg == "ES256":
            self._ec = ec.generate_private_key(ec.SECP256R1())
            numbers = self._ec.public_key().public_numbers()
            cose: dict[int, Any] = {
                1: 2, 3: -7, -1: 1,
                -2: numbers.x.to_bytes(32, "big"), -3: numbers.y.to_bytes(32, "big"),
            }  # fmt: skip
        else:
            self._ed = Ed25519PrivateKey.generate()
            raw = self._ed.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
            cose = {1: 1, 3: -8, -1: 6, -2: raw}
        self.public_key = b64url(cbor2.dumps(cose))

    def key(self, *, origin: str = ORIGIN, rp_id: str = RP_ID) -> PasskeyKey:
        alg = -7 if self.alg == "ES256" else -8
        return PasskeyKey(self.credential, self.approver, self.public_key, alg, rp_id, origin)

    def sign(self, data: bytes) -> bytes:
        if self.alg == "ES256":
            return self._ec.sign(data, ec.ECDSA(hashes.SHA256()))
        return self._ed.sign(data)

    def assertion(
        self, challenge: bytes, *, origin: str = ORIGIN, rp_id: str = RP_ID, flags: int = UP_UV
    ) -> dict[str, str]:
        """What ``navigator.credentials.get`` returns (its response fields, base64url)."""
        self.count += 1
        authenticator_data = hashlib.sha256(rp_id.encode()).digest() + struct.pack(
            ">BI", flags, self.count
        )
        client_data = json.dumps(
            {"type": "webauthn.get", "challenge": b64url(challenge), "origin": origin,
             "crossOrigin": False},
            separators=(",", ":"),
        ).encode()  # fmt: skip
        signature = self.sign(authenticator_data + hashlib.sha256(client_data).digest())
        return {
            "credential": self.credential,
            "authenticator_data": b64url(authenticator_data),
            "client_data_json": b64url(client_data),
            "signature": b64url(signature),
        }

    def vote(
        self,
        request: ApprovalRequest,
        decision: str,
        *,
        nonce: str | None = None,
        digest: str | None = None,
        step: int | None = None,
        **options: Any,
    ) -> dict[str, Any]:
        """A passkey vote's evidence on ``request`` (``digest``/``step`` override what is
        signed, to make votes for other arguments or another step)."""
        inputs: dict[str, Any] = {
            "request": request.id, "saga": request.saga,
            "step": request.ordinal if step is None else step,
            "digest": request.digest if digest is None else digest,
            "decision": decision, "nonce": nonce or os.urandom(16).hex(),
        }  # fmt: skip
        challenge = passkey_challenge(
            inputs["request"], inputs["saga"], inputs["step"], inputs["digest"],
            inputs["decision"], inputs["nonce"],
        )  # fmt: skip
        return {**self.assertion(challenge, **options), "challenge": inputs}
