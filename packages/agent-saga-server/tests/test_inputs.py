"""Hand-written bad inputs against a real server process, and the status each gets.

Every answer to a bad input is a one-line JSON ``{"detail": ...}`` that does not echo the input,
carries the security headers, and changes nothing. The table is printed with ``-s``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from agent_saga import AgentKit, read_log
from plane_testkit import CONSOLE_ORIGIN, HOSTILE_BODY_LIMIT, RunningServer

ORIGIN = "inputs-agent"
SECURITY_HEADERS = {
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}
RESERVE = "/v1/budgets/inputs/reserve"
GOOD_RESERVE = {
    "hold_id": "ab" * 12, "account": "acme", "amount": "5", "limit": "100", "saga": "s",
    "ordinal": 1, "keep_spent": True,
}  # fmt: skip


@dataclass(frozen=True)
class Bad:
    """One bad request: what it is, whose token sends it, and the status it must get."""

    what: str
    method: str
    path: str
    status: int
    scope: str | None = "admin"
    body: bytes | None = None
    content_type: str | None = "application/json"
    params: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)


def body(value: Any) -> bytes:
    return json.dumps(value).encode()


def reserve_with(**changes: str) -> bytes:
    """The good reservation body with some fields replaced by raw JSON text."""
    text = json.dumps(GOOD_RESERVE)
    for name, raw in changes.items():
        text = text.replace(
            json.dumps(name) + ": " + json.dumps(GOOD_RESERVE[name]), f'"{name}": {raw}'
        )
    return text.encode()


def big_batch(defect: str) -> bytes:
    """An ingest body over 64 KiB (parsed in the thread pool, not on the event loop) whose
    only defect is ``defect``, raw JSON text placed after the padding."""
    return ('{"records": [{"pad": "' + "x" * 100_000 + '", ' + defect + "}]}").encode()


def nested(depth: int) -> bytes:
    return ('{"reason": ' + "[" * depth + '"x"' + "]" * depth + "}").encode()


TABLE: list[Bad] = [
    Bad("NaN in a body", "POST", RESERVE, 400, "agent", reserve_with(ordinal="NaN")),
    Bad("Infinity in a body", "POST", RESERVE, 400, "agent", reserve_with(ordinal="Infinity")),
    Bad("-Infinity in a body", "POST", RESERVE, 400, "agent", reserve_with(ordinal="-Infinity")),
    Bad("a number a double cannot hold (1e999)", "POST", RESERVE, 400, "agent",
        reserve_with(ordinal="1e999")),
    Bad("a duplicate key", "POST", "/v1/killswitch/resume", 400, "admin",
        b'{"reason": "a", "reason": "b"}'),
    Bad("a lone surrogate in a string", "POST", "/v1/killswitch/resume", 400, "admin",
        b'{"reason": "\\ud800"}'),
    Bad("a lone surrogate in a key", "POST", RESERVE, 400, "agent",
        reserve_with(account='{"\\udfff": 1}')),
    Bad("bytes that are not UTF-8", "POST", "/v1/killswitch/resume", 400, "admin",
        b'{"reason": "\xff\xfe"}'),
    Bad("a duplicate key in a body over 64 KiB", "POST", f"/v1/origins/{ORIGIN}/records", 400,
        "agent", big_batch('"seq": 1, "seq": 2')),
    Bad("NaN in a body over 64 KiB", "POST", f"/v1/origins/{ORIGIN}/records", 400, "agent",
        big_batch('"seq": NaN')),
    Bad("a lone surrogate in a body over 64 KiB", "POST", f"/v1/origins/{ORIGIN}/records", 400,
        "agent", big_batch('"kind": "\\udc00"')),
    Bad("text that is not JSON", "POST", "/v1/killswitch/resume", 400, "admin", b"{reason: x"),
    Bad("JSON nested 100 deep", "POST", "/v1/killswitch/resume", 400, "admin", nested(100)),
    Bad("no body where one is required", "POST", "/v1/killswitch/resume", 400, "admin", None),
    Bad("a text/plain body", "POST", "/v1/killswitch/resume", 415, "admin",
        body({"reason": "x"}), "text/plain"),
    Bad("a body without a content type", "POST", "/v1/killswitch/resume", 415, "admin",
        body({"reason": "x"}), None),
    Bad("a string where an integer goes", "POST", RESERVE, 400, "agent",
        reserve_with(ordinal='"1"')),
    Bad("true where an integer goes", "POST", RESERVE, 400, "agent", reserve_with(ordinal="true")),
    Bad("1.0 where an integer goes", "POST", RESERVE, 400, "agent", reserve_with(ordinal="1.0")),
    Bad("an integer above 2**53 - 1", "POST", RESERVE, 400, "agent",
        reserve_with(ordinal=str(2**53))),
    Bad("a number where a decimal string goes", "POST", RESERVE, 400, "agent",
        reserve_with(amount="5")),
    Bad("an amount with an exponent", "POST", RESERVE, 400, "agent", reserve_with(amount='"1e3"')),
    Bad("a negative amount", "POST", RESERVE, 400, "agent", reserve_with(amount='"-5"')),
    Bad("a field the model does not have", "POST", RESERVE, 400, "agent",
        body({**GOOD_RESERVE, "cap": "1000000"})),
    Bad("a malformed hold id", "POST", RESERVE, 400, "agent",
        body({**GOOD_RESERVE, "hold_id": "x"})),
    Bad("a vote naming its approver", "POST", "/v1/approvals/apr-00000000000000aa/votes", 400,
        "approver", body({"decision": "approve", "approver": "someone-else"})),
    Bad("a decision that is not approve or deny", "POST",
        "/v1/approvals/apr-00000000000000aa/votes", 400, "approver", body({"decision": "maybe"})),
    Bad("a vote on an unknown request", "POST", "/v1/approvals/apr-00000000000000aa/votes", 404,
        "approver", body({"decision": "approve"})),
    Bad("2,001 records in one batch", "POST", f"/v1/origins/{ORIGIN}/records", 400, "agent",
        body({"records": [{}] * 2001})),
    Bad("a body over the limit (Content-Length)", "POST", f"/v1/origins/{ORIGIN}/records", 413,
        "agent", b"[" + b" " * HOSTILE_BODY_LIMIT + b"]"),
    Bad("a token of another scope in the body", "POST", "/v1/tokens", 400, "admin",
        body({"scope": "root", "subject": "mallory"})),
    Bad("a subject with a slash", "POST", "/v1/tokens", 400, "admin",
        body({"scope": "auditor", "subject": "a/b"})),
    Bad("limit=0", "GET", "/v1/sagas", 400, params={"limit": "0"}),
    Bad("limit=501", "GET", "/v1/sagas", 400, params={"limit": "501"}),
    Bad("limit=ten", "GET", "/v1/sagas", 400, params={"limit": "ten"}),
    Bad("a cursor the server did not hand out", "GET", "/v1/sagas", 400, params={"cursor": "xyz"}),
    Bad("a cursor past 2**53", "GET", "/v1/sagas", 400,
        params={"cursor": "99999999999999999999~o~s"}),
    Bad("since=-1", "GET", "/v1/sagas", 400, params={"since": "-1"}),
    Bad("an unknown status", "GET", "/v1/sagas", 400, params={"status": "deleted"}),
    Bad("wait=31 on a long-poll", "GET", "/v1/approvals", 400, params={"wait": "31"}),
    Bad("an audit cursor that is not an event id", "GET", "/v1/audit/events", 400,
        params={"cursor": "' OR 1=1 --"}),
    Bad("an origin starting with a dash", "GET", "/v1/origins/-x", 400),
    Bad("a malformed approval id", "GET", "/v1/approvals/apr-XYZ", 400),
    Bad("a malformed token id", "DELETE", "/v1/tokens/not-hex", 400),
    Bad("a malformed hold id in the path", "POST", "/v1/budgets/inputs/holds/zz", 400, "agent",
        body({"commit": True})),
    Bad("an unknown path", "GET", "/v1/nothing-here", 404),
    Bad("a method the path does not have", "DELETE", "/v1/sagas", 405),
    Bad("records for another origin", "POST", "/v1/origins/someone-else/records", 403, "agent",
        body({"records": [{}]})),
    Bad("the token in the query string", "GET", "/v1/whoami", 401, None,
        params={"access_token": "see-the-header"}),
    Bad("a Basic authorization", "GET", "/v1/whoami", 401, None,
        headers={"Authorization": "Basic YWRtaW46YWRtaW4="}),
]  # fmt: skip


@pytest.fixture(scope="module")
def tokens(hostile: RunningServer) -> dict[str, str]:
    assert hostile.admin is not None
    return {
        "admin": hostile.admin,
        "agent": hostile.token("agent", ORIGIN),
        "approver": hostile.token("approver", "inputs-approver"),
    }


@pytest.fixture(scope="module")
def client(hostile: RunningServer) -> Iterator[httpx.Client]:
    with hostile.client() as plain:
        yield plain


def send(client: httpx.Client, bad: Bad, tokens: dict[str, str]) -> httpx.Response:
    headers = dict(bad.headers)
    if bad.scope is not None:
        headers["Authorization"] = f"Bearer {tokens[bad.scope]}"
    if bad.content_type is not None and bad.body is not None:
        headers["Content-Type"] = bad.content_type
    return client.request(
        bad.method, bad.path, content=bad.body, params=bad.params, headers=headers
    )


def check_refusal(response: httpx.Response, bad: Bad) -> None:
    assert response.status_code == bad.status, (bad.what, response.status_code, response.text)
    detail = response.json()["detail"]
    assert isinstance(detail, str)
    assert "\n" not in detail
    assert len(detail) <= 300
    for name, value in SECURITY_HEADERS.items():
        assert response.headers[name] == value, (bad.what, name)
    if bad.status == 405:
        assert response.headers["allow"] == "GET", bad.what
    if bad.status == 401:
        assert response.headers["www-authenticate"] == "Bearer", bad.what
    sent = (bad.body or b"")[:200]
    if len(sent) > 20:
        assert sent.decode("utf-8", "replace") not in response.text, bad.what


def test_each_bad_input_gets_its_status(
    client: httpx.Client, tokens: dict[str, str], hostile: RunningServer
) -> None:
    with hostile.client(tokens["admin"]) as admin:
        before = admin.get("/v1/killswitch").json()
    rows = []
    for bad in TABLE:
        response = send(client, bad, tokens)
        check_refusal(response, bad)
        rows.append(f"{response.status_code}  {bad.method:<6} {bad.what}")
    print("\n" + "\n".join(rows))
    with hostile.client(tokens["admin"]) as admin:
        after = admin.get("/v1/killswitch").json()
        assert after["version"] == before["version"]  # no refused resume went through
        assert (
            admin.get("/v1/budgets/inputs/usage", params={"account": "acme"}).json()["held"] == "0"
        )
    assert len(TABLE) >= 45


def test_a_chunked_body_over_the_limit_is_refused_while_it_streams(
    client: httpx.Client, tokens: dict[str, str]
) -> None:
    sent = 0

    def chunks() -> Iterator[bytes]:
        nonlocal sent
        yield b'{"records": ['
        for _ in range(64):  # 4 MiB offered against a 256 KiB limit
            sent += 64 * 1024
            yield b" " * (64 * 1024)
        yield b"]}"

    response = client.post(
        f"/v1/origins/{ORIGIN}/records",
        content=chunks(),
        headers={"Authorization": f"Bearer {tokens['agent']}", "Content-Type": "application/json"},
    )
    assert response.status_code == 413
    assert "transfer-encoding" not in response.request.headers or sent >= HOSTILE_BODY_LIMIT


def _records(tmp_path: Path) -> list[dict[str, Any]]:
    """A saga's records: begin, a step's intent and outcome (committed values, with salts), end."""
    kit = AgentKit(home=tmp_path / "agent", checkpoints=False)

    @kit.tool(name="vault.put", compensate=lambda secret: None)
    def put(secret: str) -> str:
        return "stored"

    with kit.transaction("one"):
        put("s3cr3t")
    kit.close()
    return [record.to_json() for record in read_log(tmp_path / "agent")]


def without_salts(record: dict[str, Any]) -> dict[str, Any]:
    assert "salts" in record
    return {k: v for k, v in record.items() if k != "salts"}


def test_records_that_do_not_continue_the_chain_are_refused_and_kept(
    client: httpx.Client, tokens: dict[str, str], hostile: RunningServer, tmp_path: Path
) -> None:
    records = _records(tmp_path)
    agent = {"Authorization": f"Bearer {tokens['agent']}"}
    path = f"/v1/origins/{ORIGIN}/records"
    cases = [
        ("a gap (the batch starts at seq 2)", records[1:], 422),
        ("a hash that does not match", [{**records[0], "hash": "0" * 64}], 422),
        ("a prev that is not the stored tail", [{**records[0], "prev": "1" * 64}], 409),
        ("out of order", [records[1], records[0]], 422),
        ("a kind over 200 characters", [{**records[0], "kind": "k" * 201}], 400),
        ("a salt that is not the one hashed", [records[0], {**records[1], "salts": "A" * 22}], 422),
        ("committed values without their salts", [records[0], without_salts(records[1])], 422),
        ("salts on a version 1 record", [{**records[0], "v": 1, "salts": "A" * 22}], 422),
    ]
    for what, batch, status in cases:
        answer = client.post(path, json={"records": batch}, headers=agent)
        assert answer.status_code == status, (what, answer.text)
    accepted = client.post(path, json={"records": records}, headers=agent)
    assert accepted.json()["accepted"] == len(records)
    with hostile.client(tokens["admin"]) as admin:
        kept = admin.get("/v1/audit/conflicts", params={"origin": ORIGIN}).json()["conflicts"]
    assert len(kept) == 7  # the refused batches that reached the store (not the 400)
    assert kept[1]["body"]["records"][0]["hash"] == "0" * 64


def test_a_checkpoint_that_does_not_open_is_refused(
    client: httpx.Client, tokens: dict[str, str]
) -> None:
    answer = client.post(
        f"/v1/origins/{ORIGIN}/checkpoints",
        json={"note": "not a signed note", "proof": [], "verifier": "nobody+00000000+AAAA"},
        headers={"Authorization": f"Bearer {tokens['agent']}"},
    )
    assert answer.status_code == 422
    assert answer.json()["detail"].startswith("checkpoint refused")


def test_cors_only_for_the_configured_origin(hostile: RunningServer) -> None:
    preflight = {"Access-Control-Request-Method": "GET"}
    with hostile.client() as client:
        allowed = client.options("/v1/whoami", headers={"Origin": CONSOLE_ORIGIN, **preflight})
        assert allowed.headers["access-control-allow-origin"] == CONSOLE_ORIGIN
        evil = {"Origin": "https://evil.example"}
        other = client.options("/v1/whoami", headers={**evil, **preflight})
        assert "access-control-allow-origin" not in other.headers
        simple = client.get("/v1/health", headers=evil)
        assert "access-control-allow-origin" not in simple.headers


def test_the_docs_page_and_the_openapi_document_are_served(hostile: RunningServer) -> None:
    with hostile.client() as client:
        document = client.get("/openapi.json").json()
        docs = client.get("/docs")
    assert document["info"]["title"] == "agent-saga control plane"
    assert all(path.startswith("/v1/") for path in document["paths"])
    assert docs.status_code == 200
    assert "swagger" in docs.text.lower()
    assert "frame-ancestors 'none'" in docs.headers["content-security-policy"]
