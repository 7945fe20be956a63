"""The authorization matrix, against a real server process: every operation of the OpenAPI
document called with every scope, with an agent token of another origin, and with no token and
malformed, unknown, wrongly-signed, expired and revoked ones.

What is expected comes from ``matrix.ALLOWED`` (written by hand, not read from the server):
a token that is not valid is a 401 with a ``Bearer`` challenge, a valid token of a scope the
operation does not allow is a 403, and a valid token of an allowed scope gets past both (the
body is an empty object, so an allowed write stops at validation and changes nothing).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from matrix import ALLOWED, PUBLIC
from plane_testkit import RunningServer

ORIGIN = "matrix-agent"
FILL = {
    "{token_id}": "0123456789abcdef",
    "{origin}": ORIGIN,
    "{saga}": "no-such-saga",
    "{request_id}": "apr-00000000000000ff",
    "{budget}": "matrix-budget",
    "{hold_id}": "0" * 24,
    "{credential_id}": "00ff",
}
ORIGIN_BOUND = {
    ("GET", "/v1/origins/{origin}"),
    ("POST", "/v1/origins/{origin}/records"),
    ("POST", "/v1/origins/{origin}/checkpoints"),
}
"""Operations an agent token may call only for its own origin."""


def concrete(path: str) -> str:
    for name, value in FILL.items():
        path = path.replace(name, value)
    return path


@pytest.fixture(scope="module")
def credentials(hostile: RunningServer) -> dict[str, str | None]:
    """Each kind of credential, as the Authorization header it sends (None: no header)."""
    assert hostile.admin is not None
    with hostile.client(hostile.admin) as admin:

        def issue(body: dict[str, object]) -> dict[str, Any]:
            answer = admin.post("/v1/tokens", json=body)
            assert answer.status_code == 201, answer.text
            return dict(answer.json())

        revoked = issue({"scope": "admin", "subject": "gone"})
        assert admin.delete(f"/v1/tokens/{revoked['id']}").status_code == 204
        expired = issue({"scope": "admin", "subject": "late", "expires_in": 1})
        agent = issue({"scope": "agent", "subject": "m-agent", "origin": ORIGIN})
        other = issue({"scope": "agent", "subject": "m-other", "origin": "matrix-other"})
        approver = issue({"scope": "approver", "subject": "m-approver"})
        auditor = issue({"scope": "auditor", "subject": "m-auditor"})
    token_id, secret = agent["token"][4:20], agent["token"][21:]  # asg_<id>_<secret>
    time.sleep(max(0.0, expired["expires_at"] - time.time()) + 0.05)
    return {
        "none": None,
        "malformed": "Bearer not-a-token",
        "bearer with nothing": "Bearer",
        "basic scheme": "Basic " + agent["token"],
        "unknown": "Bearer asg_" + "f" * 16 + "_" + secret,
        "wrong secret": f"Bearer asg_{token_id}_" + "A" * 43,
        "expired": "Bearer " + expired["token"],
        "revoked": "Bearer " + revoked["token"],
        "agent": "Bearer " + agent["token"],
        "agent of another origin": "Bearer " + other["token"],
        "approver": "Bearer " + approver["token"],
        "admin": "Bearer " + hostile.admin,
        "auditor": "Bearer " + auditor["token"],
    }


def expected(method: str, path: str, credential: str) -> str:
    """``ok`` (past authentication and authorization), ``401`` or ``403``."""
    allowed = ALLOWED[(method, path)]
    if allowed == PUBLIC:
        return "ok"
    scope = "agent" if credential == "agent of another origin" else credential
    if scope not in ("agent", "approver", "admin", "auditor"):
        return "401"
    if scope not in allowed:
        return "403"
    if credential == "agent of another origin" and (method, path) in ORIGIN_BOUND:
        return "403"
    return "ok"


def call(client: httpx.Client, method: str, path: str, header: str | None) -> httpx.Response:
    headers = {} if header is None else {"Authorization": header}
    url = concrete(path)
    if path.endswith("/stream"):
        with client.stream(method, url, headers=headers) as response:
            return response  # the status only: an allowed stream never ends
    body: dict[str, Any] | None = {} if method in ("POST", "PUT") else None
    return client.request(method, url, headers=headers, json=body)


@pytest.fixture(scope="module")
def client(hostile: RunningServer) -> Iterator[httpx.Client]:
    with hostile.client() as plain:
        yield plain


def test_every_operation_with_every_credential(
    client: httpx.Client, credentials: dict[str, str | None], hostile: RunningServer
) -> None:
    with hostile.client() as plain:
        paths = plain.get("/openapi.json").json()["paths"]
    documented = {(m.upper(), p) for p, item in paths.items() for m in item}
    assert documented == set(ALLOWED)  # the matrix names every operation, and no other
    seen: Counter[str] = Counter()
    for method, path in sorted(ALLOWED):
        for credential, header in credentials.items():
            want = expected(method, path, credential)
            response = call(client, method, path, header)
            got = str(response.status_code)
            where = (method, path, credential, got)
            if want == "ok":
                assert response.status_code not in (401, 403), where
                assert response.status_code < 500, where
            else:
                assert got == want, where
            if got == "401":
                assert response.headers["www-authenticate"] == "Bearer", where
            seen[want] += 1
    print(f"\nauthorization matrix: {sum(seen.values())} calls, {dict(seen)}")
    assert seen["401"] == 8 * (len(ALLOWED) - 2)  # 8 invalid credentials, all but health/ready


def test_a_revoked_token_ends_its_kill_switch_stream(hostile: RunningServer) -> None:
    token = hostile.token("agent", "stream-agent")
    assert hostile.admin is not None
    with hostile.client(token, timeout=10) as agent, hostile.client(hostile.admin) as admin:
        token_id = agent.get("/v1/whoami").json()["token_id"]
        with agent.stream("GET", "/v1/killswitch/stream") as stream:
            lines = stream.iter_lines()
            assert next(line for line in lines if line.startswith("data: "))
            assert admin.delete(f"/v1/tokens/{token_id}").status_code == 204
            revoked_at = time.monotonic()
            for _ in lines:
                assert time.monotonic() - revoked_at < 5
        assert time.monotonic() - revoked_at < 3  # the stream ended (checked every second)
        assert agent.get("/v1/whoami").status_code == 401
