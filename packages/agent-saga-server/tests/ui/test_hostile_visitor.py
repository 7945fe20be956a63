"""The dashboard's newer pages attacked over HTTP by a visitor who holds a session: a stream
kept open past logout, the playground's run limit lifted by opening more sessions, and the
headers of the answers that refuse a form."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import httpx
from agent_saga import AgentKit
from agent_saga.testing.postgres import scratch_schema, server_for_tests
from agent_saga_server.dashboard.sessions import create_tables, open_session, viewer
from agent_saga_server.store.db import Database, open_database
from agent_saga_server.store.tokens import issue
from browser_kit import Dashboard, issue_token

CSRF = re.compile(r'name="csrf" value="([0-9a-f]+)"')


def signed_in(dashboard: Dashboard, subject: str) -> tuple[httpx.Client, str]:
    """A client holding a fresh session of ``subject`` (admin), and its CSRF token."""
    client = httpx.Client(base_url=dashboard.url, trust_env=False, timeout=10)
    landed = client.get(dashboard.login_link(subject), follow_redirects=True)
    assert landed.status_code == 200
    found = CSRF.search(landed.text)
    assert found is not None
    return client, found.group(1)


def note(text: str) -> str:
    return text


def test_an_open_sagas_stream_ends_when_its_session_is_logged_out(dashboard: Dashboard) -> None:
    client, csrf = signed_in(dashboard, "lou")
    lines: list[str] = []
    ended = threading.Event()

    def read() -> None:
        try:
            with client.stream("GET", "/ui/sagas-stream", timeout=httpx.Timeout(10, read=30)) as s:
                assert s.status_code == 200
                for line in s.iter_lines():
                    lines.append(line)
        except httpx.HTTPError:
            pass
        finally:
            ended.set()

    reader = threading.Thread(target=read, name="stream-after-logout")
    reader.start()
    try:
        deadline = time.monotonic() + 10
        while "retry: 1000" not in lines and time.monotonic() < deadline:
            time.sleep(0.05)
        with httpx.Client(base_url=dashboard.url, trust_env=False, cookies=client.cookies) as other:
            out = other.post("/ui/logout", data={"csrf": csrf})
        assert out.status_code == 303
        with AgentKit(home=dashboard.home) as kit:
            step = kit.tool(name="after.logout", compensate=lambda text: None)(note)
            with kit.transaction("seen-after-logout"):
                step(text="x")
        assert ended.wait(8), "the stream still runs 8 s after its session ended"
        assert not any("seen-after-logout" in line for line in lines)
    finally:
        client.close()
        reader.join(30)


def test_more_sessions_from_one_token_do_not_lift_the_playground_limit(
    dashboard: Dashboard,
) -> None:
    token = issue_token(dashboard.home, "admin", "mo")
    form = {"scenario": "servo", "run": "before", "servo": "10"}
    statuses = []
    for _ in range(2):  # two sessions of one person, from one pasted token
        with httpx.Client(base_url=dashboard.url, trust_env=False, timeout=10) as client:
            landed = client.post("/ui/login", data={"token": token}, follow_redirects=True)
            found = CSRF.search(landed.text)
            assert found is not None
            for _ in range(12):
                sent = client.post("/ui/playground", data={**form, "csrf": found.group(1)})
                statuses.append(sent.status_code)
    assert statuses.count(200) == 12
    assert statuses[12:] == [429] * 12


def test_refusals_of_the_new_pages_carry_the_dashboard_headers(dashboard: Dashboard) -> None:
    client, csrf = signed_in(dashboard, "hal")
    try:
        base = {"scenario": "dose", "run": "after"}
        refused = {
            "no csrf": client.post("/ui/playground", data={**base, "dose": "5"}),
            "nan": client.post("/ui/playground", data={**base, "dose": "nan", "csrf": csrf}),
            "text": client.post(
                "/ui/playground", data={**base, "dose": "<b>x</b>" * 1000, "csrf": csrf}
            ),
        }
        assert refused["no csrf"].status_code == 403
        assert refused["nan"].status_code in (400, 422)
        assert refused["text"].status_code in (400, 422)
        for what, answer in refused.items():
            assert answer.headers.get("x-content-type-options") == "nosniff", what
            assert "default-src 'none'" in answer.headers.get("content-security-policy", ""), what
            assert "frame-ancestors 'none'" in answer.headers["content-security-policy"], what
    finally:
        client.close()


def test_a_revoked_token_ends_the_sessions_it_opened(dashboard: Dashboard) -> None:
    """A session opened with a pasted control-plane token lives only as long as the token: once
    it is revoked, its pages send to the login page and its forms (a vote) are refused with a
    401, while a session opened from a login link lives on."""
    from agent_saga_server.store.tokens import authenticate, revoke

    token = issue_token(dashboard.home, "approver", "rex")
    rex = httpx.Client(base_url=dashboard.url, trust_env=False, timeout=10)
    other, _ = signed_in(dashboard, "ola")
    try:
        landed = rex.post("/ui/login", data={"token": token}, follow_redirects=True)
        found = CSRF.search(landed.text)
        assert found is not None
        assert rex.get("/ui/approvals").status_code == 200
        db = open_database(None, dashboard.home)
        try:
            caller = authenticate(db, token)
            assert caller is not None
            assert revoke(db, caller.token_id)
        finally:
            db.close()
        page = rex.get("/ui/approvals")
        assert page.status_code == 303
        assert page.headers["location"] == "/ui/login"
        vote = rex.post(
            "/ui/approvals/apr-0000000000000000",
            data={"decision": "approve", "csrf": found.group(1)},
        )
        assert vote.status_code == 401
        designer = rex.post(
            "/ui/designer/validate",
            content=b"<x/>",
            headers={"x-csrf-token": found.group(1)},
        )
        assert designer.status_code == 401
        passkey = rex.post(
            "/ui/approvals/apr-0000000000000000/passkey",
            json={"challenge_id": "x", "credential": {}},
            headers={"x-csrf-token": found.group(1)},
        )
        assert passkey.status_code == 401
        assert other.get("/ui/approvals").status_code == 200
    finally:
        rex.close()
        other.close()


def _bound_sessions_end_with_their_token(db: Database) -> None:
    try:
        create_tables(db)
        _, info = issue(db, "auditor", "ida")
        cookies = [open_session(db, "ida", "auditor", info.id) for _ in range(2)]
        unbound = open_session(db, "ida", "auditor")
        assert all(viewer(db, c) is not None for c in [*cookies, unbound])
        with db.transaction() as tx:
            tx.execute("UPDATE tokens SET expires_at = ? WHERE id = ?", (time.time() - 1, info.id))
        assert [viewer(db, c) for c in cookies] == [None, None]
        with db.transaction() as tx:
            tx.execute("UPDATE tokens SET expires_at = NULL WHERE id = ?", (info.id,))
        assert viewer(db, cookies[0]) is not None
        with db.transaction() as tx:
            tx.execute("DELETE FROM tokens WHERE id = ?", (info.id,))
        assert viewer(db, cookies[0]) is None
        assert viewer(db, unbound) is not None  # a login link's session: no token to outlive
    finally:
        db.close()


def test_a_session_bound_to_a_token_ends_when_the_token_expires_or_is_gone(tmp_path: Path) -> None:
    _bound_sessions_end_with_their_token(open_database(None, tmp_path))


def test_the_same_on_postgresql(tmp_path: Path) -> None:
    with server_for_tests() as url, scratch_schema(url) as schema:
        _bound_sessions_end_with_their_token(open_database(url, tmp_path, schema=schema))
