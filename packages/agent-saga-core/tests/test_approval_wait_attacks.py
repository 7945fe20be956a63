"""Attacks on a waiting approval that was seeded from the process's shared approval book: the
trusted administrator keys change while it waits, a key is revoked between the seeding and the
vote, a vote is written for another request. Each waiter must judge a vote as a full read of the
log with today's configuration would (as certify does)."""

from __future__ import annotations

import base64
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from agent_saga import Entry, FileLogStore
from agent_saga._approvals.keys import KeyGrant, key_message
from agent_saga._approvals.request import (
    VOTE,
    ApprovalBook,
    ApprovalRequest,
    action_digest,
    signing_message,
)
from agent_saga._approvals.votes import _BOOKS
from agent_saga._approvals.wait import Approvals, Waiter
from agent_saga._clock import SystemClock
from agent_saga._log.admins import admin_id, trusting_admins
from agent_saga._log.codec import JSONValue
from agent_saga._log.records import Kind
from agent_saga.proofs._note import NoteVerifier
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

DIGEST = action_digest("bank.wire", "irreversible", {"usd": 900})


def _key_record(
    store: FileLogStore, admin: Ed25519PrivateKey, action: str, approver: Ed25519PrivateKey
) -> str:
    """An ``approver.key_added``/``key_revoked`` of ``approver``'s key for alice, signed by
    ``admin``; the key's text."""
    first = next(iter(store.records())).hash
    key_text = NoteVerifier("approver/alice", approver.public_key().public_bytes_raw()).encode()
    nonce = secrets.token_hex(8)
    signed = admin.sign(key_message(action, "alice", key_text, nonce, first))
    raw = admin.public_key().public_bytes_raw()
    grant = KeyGrant("admin", admin_id(raw), nonce, base64.b64encode(signed).decode())
    kind = Kind.KEY_ADDED if action == "add" else Kind.KEY_REVOKED
    data = {"approver": "alice", "key": key_text, **grant.to_data()}
    store.append([Entry(kind, None, data, 0)], sync=True)
    return key_text


def _request(store: FileLogStore, request_id: str) -> ApprovalRequest:
    now = time.time()
    request = ApprovalRequest(
        id=request_id, saga="s1", ordinal=1, tool="bank.wire", semantics="irreversible",
        digest=DIGEST, args={"usd": 900}, rule="r", reason="r", approvers=("alice",),
        quorum=1, requested_at=now, expires_at=now + 60,
    )  # fmt: skip
    store.append([Entry(Kind.APPROVAL_REQUESTED, "s1", request.to_data(), 0)], sync=True)
    return request


def _signed_vote(
    store: FileLogStore, request: ApprovalRequest, key: Ed25519PrivateKey, key_text: str
) -> None:
    """A vote for ``request`` signed by ``key``, appended as any writer of the home could."""
    nonce = secrets.token_hex(8)
    message = signing_message(request.id, "s1", 1, DIGEST, nonce, "alice")
    data: dict[str, JSONValue] = {
        "request": request.id, "saga": "s1", "by": "alice", "decision": "approve",
        "channel": "test", "note": "", "at": time.time(), "nonce": nonce, "key": key_text,
        "signature": base64.b64encode(key.sign(message)).decode(),
    }  # fmt: skip
    store.append([Entry(VOTE, None, data, 0)], sync=True)


@contextmanager
def _seeded_home(tmp_path: Path) -> Iterator[FileLogStore]:
    """A home with a first record (key records are bound to its hash)."""
    with FileLogStore(tmp_path / "home") as store:
        store.append([Entry("saga.begin", "s0", {}, 0)], sync=True)
        yield store


def test_a_seeded_wait_stops_trusting_an_administrator_removed_while_it_waits(
    tmp_path: Path,
) -> None:
    """The configuration drops administrator A (its key leaked) while a wait seeded before the
    change is running: keys A registered, before or after the change, no longer count for it."""
    admin_a, admin_b = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    alice = Ed25519PrivateKey.generate()
    approvals = Approvals(approvers=["alice"], require_signature=True)
    with _seeded_home(tmp_path) as store:
        with trusting_admins([admin_a.public_key().public_bytes_raw()]):
            key_text = _key_record(store, admin_a, "add", alice)
            with _BOOKS.lock:
                assert len(_BOOKS.current(store).keys.active("alice")) == 1
            request = _request(store, "apr-" + secrets.token_hex(8))
            waiter = Waiter(approvals, store, SystemClock(), request)
            assert waiter.look(DIGEST) is None
        with trusting_admins([admin_b.public_key().public_bytes_raw()]):
            _signed_vote(store, request, alice, key_text)
            assert waiter.look(DIGEST) is None  # alice's key rests on A alone
            full = ApprovalBook().take_all(store.records())
            assert full.keys.active("alice") == []  # as certify judges it today
            assert any("alice" in why for why in waiter.ignored), waiter.ignored


@contextmanager
def _alice_with_a_key(tmp_path: Path) -> Iterator[tuple[FileLogStore, _Alice]]:
    """A home where one trusted administrator registered a key for alice."""
    admin, alice = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    with (
        _seeded_home(tmp_path) as store,
        trusting_admins([admin.public_key().public_bytes_raw()]),
    ):
        yield store, _Alice(admin, alice, _key_record(store, admin, "add", alice))


class _Alice(NamedTuple):
    admin: Ed25519PrivateKey
    key: Ed25519PrivateKey
    key_text: str


SIGNED = Approvals(approvers=["alice"], require_signature=True)


def test_a_key_revoked_between_seeding_and_the_vote_does_not_count(tmp_path: Path) -> None:
    with _alice_with_a_key(tmp_path) as (store, alice):
        request = _request(store, "apr-" + secrets.token_hex(8))
        waiter = Waiter(SIGNED, store, SystemClock(), request)
        assert waiter.look(DIGEST) is None
        _key_record(store, alice.admin, "revoke", alice.key)
        _signed_vote(store, request, alice.key, alice.key_text)
        assert waiter.look(DIGEST) is None
        assert waiter.ignored == [
            "alice: the signature does not verify with a registered, unrevoked key of the approver"
        ]


def test_a_vote_for_another_request_does_not_decide_this_one(tmp_path: Path) -> None:
    with _alice_with_a_key(tmp_path) as (store, alice):
        mine = _request(store, "apr-" + secrets.token_hex(8))
        other = _request(store, "apr-" + secrets.token_hex(8))
        waiter = Waiter(SIGNED, store, SystemClock(), mine)
        _signed_vote(store, other, alice.key, alice.key_text)
        assert waiter.look(DIGEST) is None
        _signed_vote(store, mine, alice.key, alice.key_text)
        assert waiter.look(DIGEST) == "approved"
