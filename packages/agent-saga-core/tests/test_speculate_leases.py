"""Leases never count when forged, mutated, truncated, re-keyed or replayed; keys rotate; a crash
between redemption and use leaves the lease spent.

Hypothesis mutates a valid lease in every way it can think of (a byte changed, cut, inserted,
every field re-issued with another value under another key, non-ASCII text) and none is ever
accepted; the field binding is checked one field at a time.
"""

from __future__ import annotations

import base64
import hashlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from agent_saga import REVERSIBLE, AgentKit, FakeClock, SequentialIds
from agent_saga._engine.speculation.keys import (
    MAX_TTL,
    ROTATE_AFTER,
    FileLeaseKeys,
    LeaseKey,
    MemoryLeaseKeys,
)
from agent_saga._engine.speculation.lease import (
    Lease,
    LeaseClaims,
    Refused,
    _b64,
    args_digest,
    check,
    issue,
)
from agent_saga._log.codec import canonical
from agent_saga._log.records import Kind
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

NOW = 1_700_000_000.0
ARGS = canonical({"sku": "A1", "qty": 2})
MANY = settings(
    max_examples=200,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


def _issued(keys: MemoryLeaseKeys) -> tuple[str, LeaseClaims]:
    key = keys.current(NOW)
    claims = LeaseClaims(
        kid=key.kid,
        saga="saga-0001",
        tool="prices.lookup",
        ordinal=3,
        intent="ab" * 32,
        args=args_digest(key, ARGS),
        exp=int((NOW + 60) * 1000),
        nonce="cd" * 16,
    )
    return issue(key, claims), claims


def _check(token: object, keys: MemoryLeaseKeys, now: float = NOW) -> LeaseClaims | Refused:
    return check(token, keys, now, saga="saga-0001", tool="prices.lookup", canonical_args=ARGS)


KEYS = MemoryLeaseKeys()
TOKEN, CLAIMS = _issued(KEYS)
OTHER = MemoryLeaseKeys()  # a second party's key, under its own id


def test_the_valid_lease_holds() -> None:
    assert _check(TOKEN, KEYS) == CLAIMS
    assert _check(Lease(TOKEN, "s", "t", 1, CLAIMS.kid, 0.0, CLAIMS.nonce), KEYS) == CLAIMS


def test_the_mac_and_the_argument_digest_are_plain_keyed_blake2s_under_the_key() -> None:
    """The keyed states a key holds give the standard keyed BLAKE2s-256 (RFC 7693), copy after
    copy, under the documented personalizations."""
    key = KEYS.current(NOW)
    signed, _, mac = TOKEN.rpartition(".")
    expected = hashlib.blake2s(signed.encode(), key=key.secret, person=b"asl3 mac").digest()
    assert mac == base64.urlsafe_b64encode(expected).rstrip(b"=").decode()
    for _ in range(3):  # the key's states are copied, never consumed
        plain = hashlib.blake2s(ARGS, key=key.secret, person=b"asl3 arg").hexdigest()
        assert args_digest(key, ARGS) == plain
    assert issue(key, CLAIMS) == TOKEN
    assert args_digest(key, ARGS) != hashlib.blake2s(ARGS, key=key.secret).hexdigest()


PINNED = (
    "asl3.0123456789abcdef.AAABi8_mUmAAAAAAAAAAA83Nzc3Nzc3Nzc3Nzc3Nzc2rq6urq6urq6urq6urq6urq6urq6urq"
    "6urq6urq6urq-_v7-_v7-_v7-_v7-_v7-_v7-_v7-_v7-_v7-_v7-_vAAlzYWdhLTAwMDFwcmljZXMubG9va3Vw."
    "oX3GU_SsqXUcsQAqZGPl14wO2dHpXPqkgkznBonKji0"
)
"""The lease the asl3 code issued for the claims below (its MAC checked against hashlib's keyed
BLAKE2s in the test)."""
ASL2 = (
    "asl2.0123456789abcdef.AAABi8_mUmAAAAAAAAAAA83Nzc3Nzc3Nzc3Nzc3Nzc2rq6urq6urq6urq6urq6urq6urq6urq"
    "6urq6urq6urq-_v7-_v7-_v7-_v7-_v7-_v7-_v7-_v7-_v7-_v7-_vAAlzYWdhLTAwMDFwcmljZXMubG9va3Vw."
    "Q5sKU6TzDztblx3jFhNE0ctjsbzlYEaXEFigjLsHpPQ"
)
"""The same claims under the same secret as the retired asl2 code issued them (HMAC-SHA-256)."""


class _OneKey:
    def __init__(self, key: LeaseKey) -> None:
        self.key = key

    def current(self, now: float) -> LeaseKey:
        return self.key

    def get(self, kid: str, now: float) -> LeaseKey | None:
        return self.key if kid == self.key.kid else None

    def rotate(self, now: float) -> LeaseKey:
        return self.key


def test_a_pinned_lease_vector() -> None:
    """A lease of fixed claims under a fixed secret is this exact text (the asl3 format), and
    the same claims in the retired asl2 format are refused as such, even unexpired under a
    key still kept."""
    key = LeaseKey("0123456789abcdef", bytes(range(32)), NOW)
    claims = LeaseClaims(
        key.kid, "saga-0001", "prices.lookup", 3, "ab" * 32, "ef" * 32, 1_700_000_060_000, "cd" * 16
    )
    assert issue(key, claims) == PINNED
    assert check(
        PINNED, _OneKey(key), NOW, saga="saga-0001", tool="prices.lookup", canonical_args=b""
    ) == Refused("issued for other arguments", claims)
    signed = PINNED.rpartition(".")[0].encode()
    mac = hashlib.blake2s(signed, key=key.secret, person=b"asl3 mac").digest()
    assert PINNED.endswith("." + base64.urlsafe_b64encode(mac).rstrip(b"=").decode())
    retired = check(
        ASL2, _OneKey(key), NOW, saga="saga-0001", tool="prices.lookup", canonical_args=b""
    )
    assert retired == Refused("an asl2 lease: that format is no longer accepted")


@MANY
@given(position=st.integers(0, len(TOKEN) - 1), char=st.characters(codec="utf-8"))
def test_a_changed_character_never_counts(position: int, char: str) -> None:
    mutated = TOKEN[:position] + char + TOKEN[position + 1 :]
    if mutated != TOKEN:
        assert isinstance(_check(mutated, KEYS), Refused)


@MANY
@given(cut=st.integers(0, len(TOKEN) - 1), extra=st.text(max_size=3))
def test_a_cut_or_extended_lease_never_counts(cut: int, extra: str) -> None:
    assert isinstance(_check(TOKEN[:cut], KEYS), Refused)
    assert isinstance(_check(TOKEN[:cut] + extra + TOKEN[cut:], KEYS), Refused) or not extra


@MANY
@given(flips=st.lists(st.tuples(st.integers(0, len(TOKEN) - 1), st.integers(1, 127)), min_size=1))
def test_flipped_bits_never_count(flips: list[tuple[int, int]]) -> None:
    raw = bytearray(TOKEN.encode())
    for position, mask in flips:
        raw[position] ^= mask
    mutated = raw.decode("latin-1")
    if mutated != TOKEN:
        assert isinstance(_check(mutated, KEYS), Refused)


FIELDS = {
    "kid": st.just(OTHER.current(NOW).kid),
    "saga": st.text(max_size=12),
    "tool": st.text(max_size=12),
    "ordinal": st.integers(-5, 10**6),
    "intent": st.text("0123456789abcdef", min_size=64, max_size=64),
    "args": st.text("0123456789abcdef", min_size=64, max_size=64),
    "exp": st.integers(0, 2**40),
    "nonce": st.text("0123456789abcdef", min_size=32, max_size=32),
}


@MANY
@given(data=st.data(), name=st.sampled_from(sorted(FIELDS)))
def test_a_claim_changed_without_the_key_never_counts(data: st.DataObject, name: str) -> None:
    """Each field changed and the MAC kept, or the MAC made with another party's key."""
    value = data.draw(FIELDS[name])
    changed = CLAIMS._replace(**{name: value})  # type: ignore[arg-type]
    if changed == CLAIMS:
        return
    prefix, _, _, mac = TOKEN.split(".")
    forged = f"{prefix}.{changed.kid}.{_b64(changed.payload())}.{mac}"
    assert isinstance(_check(forged, KEYS), Refused)
    assert isinstance(_check(issue(OTHER.current(NOW), changed), KEYS), Refused)


@pytest.mark.parametrize(
    ("name", "value", "reason"),
    [
        ("saga", "saga-0002", "issued for another saga"),
        ("tool", "prices.other", "issued for tool 'prices.other', not 'prices.lookup'"),
        ("args", "00" * 32, "issued for other arguments"),
        ("exp", int(NOW * 1000), "expired"),
    ],
)
def test_each_binding_is_checked_on_an_honestly_issued_lease(
    name: str, value: Any, reason: str
) -> None:
    """A lease the key holder issued for something else does not hold for this call."""
    token = issue(KEYS.current(NOW), CLAIMS._replace(**{name: value}))
    verdict = _check(token, KEYS)
    assert isinstance(verdict, Refused)
    assert verdict.reason == reason


def test_expiry_is_exclusive_and_unknown_key_ids_are_refused() -> None:
    assert _check(TOKEN, KEYS, CLAIMS.exp / 1000 - 0.001) == CLAIMS
    assert _check(TOKEN, KEYS, CLAIMS.exp / 1000) == Refused("expired", CLAIMS)
    verdict = _check(TOKEN, OTHER)
    assert isinstance(verdict, Refused)
    assert verdict.reason.startswith("unknown or retired key id")
    assert _check(b"asl2", KEYS) == Refused("not a lease (text of at most 2048 ASCII characters)")
    assert isinstance(_check("é" + TOKEN, KEYS), Refused)


# -- through a kit ---------------------------------------------------------------------------


@settings(
    max_examples=25,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(position=st.integers(0, 200), char=st.sampled_from("AZaz09-_.x"))
def test_a_kit_never_hands_out_a_result_for_a_mutated_lease(
    tmp_path_factory: pytest.TempPathFactory, position: int, char: str
) -> None:
    calls: list[str] = []
    with AgentKit(home=tmp_path_factory.mktemp("k"), store="memory") as kit:

        @kit.tool(name="prices.lookup", semantics=REVERSIBLE)
        def lookup(sku: str) -> str:
            calls.append(sku)
            return f"price of {sku}"

        with kit.transaction("t"):
            lease = kit.speculate(lookup, sku="A1")
            token = str(lease)
            at = position % len(token)
            mutated = token[:at] + char + token[at + 1 :]
            if mutated == token:
                return
            assert kit.redeem(mutated, lookup, sku="A1") == "price of A1"
            assert calls == ["A1", "A1"]  # it ran again: the mutated lease yielded nothing
            assert kit.redeem(lease, lookup, sku="A1") == "price of A1"
            assert calls == ["A1", "A1"]  # the real one still holds, once
        refused = [r for r in kit.store.records() if r.kind == Kind.SPECULATION_REFUSED]
        assert len(refused) == 1
        assert refused[0].data["reason"]


def test_rotation_keeps_old_leases_valid_under_their_own_key_id_only(tmp_path: Path) -> None:
    clock = FakeClock(NOW)
    calls: list[str] = []
    with AgentKit(home=tmp_path / "home", clock=clock, ids=SequentialIds()) as kit:

        @kit.tool(name="prices.lookup", semantics=REVERSIBLE)
        def lookup(sku: str) -> str:
            calls.append(sku)
            return sku.lower()

        kit.speculation.ttl = MAX_TTL
        with kit.transaction("t"):
            old = kit.speculate(lookup, sku="A1")
            clock.advance(1)
            kit.speculation.keys.rotate(clock.now())
            new = kit.speculate(lookup, sku="B2")
            assert new.key_id != old.key_id
            prefix, _, payload, mac = str(old).split(".")
            relabelled = f"{prefix}.{new.key_id}.{payload}.{mac}"
            assert kit.redeem(relabelled, lookup, sku="A1") == "a1"  # ran again
            assert kit.redeem(old, lookup, sku="A1") == "a1"
            assert kit.redeem(new, lookup, sku="B2") == "b2"
        assert calls == ["A1", "B2", "A1"]
        other_process = FileLeaseKeys(kit.home)  # another process on the same home
        assert other_process.get(old.key_id, clock.now()) is not None
        clock.advance(MAX_TTL + 1)  # the old key's successor is now older than any lease
        third = kit.speculation.keys.rotate(clock.now())
        files = sorted(p.stem for p in (kit.home / "keys" / "leases").glob("*.key"))
        assert files == sorted([new.key_id, third.kid])
        assert FileLeaseKeys(kit.home).get(old.key_id, clock.now()) is None
        clock.advance(ROTATE_AFTER)
        assert kit.speculation.keys.current(clock.now()).kid not in files  # rotated by age
        reasons = [
            r.data["reason"] for r in kit.store.records() if r.kind == Kind.SPECULATION_REFUSED
        ]
        assert reasons == ["forged or altered: its MAC does not verify"]


CRASHING_AGENT = textwrap.dedent(
    """
    import os, signal, sys
    from agent_saga import REVERSIBLE, AgentKit, SequentialIds

    kit = AgentKit(home=sys.argv[1], ids=SequentialIds("crash"))

    @kit.tool(name="prices.lookup", semantics=REVERSIBLE)
    def lookup(sku: str) -> str:
        return "price of " + sku

    spent = kit.speculation.spent

    class DieAfterRedeeming:
        def is_spent(self, nonce, exp):
            return spent.is_spent(nonce, exp)

        def spend(self, nonce, exp, now):
            done = spent.spend(nonce, exp, now)
            os.kill(os.getpid(), signal.SIGKILL)  # redeemed, and the result never used
            return done

    with kit.transaction("t"):
        lease = kit.speculate(lookup, sku="A1")
        with open(sys.argv[2], "w") as out:
            out.write(str(lease))
        kit.store.sync()
        kit.speculation.spent = DieAfterRedeeming()
        kit.redeem(lease, lookup, sku="A1")
    """
)


def test_a_crash_between_redemption_and_use_does_not_allow_a_second_redemption(
    tmp_path: Path,
) -> None:
    home, token_file = tmp_path / "home", tmp_path / "lease.txt"
    env = {**os.environ, "AGENT_SAGA_HOME": str(home)}
    child = subprocess.run(
        [sys.executable, "-c", CRASHING_AGENT, str(home), str(token_file)],
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    token = token_file.read_text()
    calls: list[str] = []
    # The same saga id, key and home: everything matches but the lease is spent.
    with AgentKit(home=home, ids=SequentialIds("crash")) as kit:

        @kit.tool(name="prices.lookup", semantics=REVERSIBLE)
        def lookup(sku: str) -> str:
            calls.append(sku)
            return "fresh price of " + sku

        with kit.transaction("t"):
            assert kit.redeem(token, lookup, sku="A1") == "fresh price of A1"
        refused = [r for r in kit.store.records() if r.kind == Kind.SPECULATION_REFUSED]
    assert calls == ["A1"]
    assert [r.data["reason"] for r in refused] == ["already redeemed"]
