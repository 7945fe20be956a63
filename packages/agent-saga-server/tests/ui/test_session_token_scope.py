"""A session opened with a control-plane token acts with that token's subject and scope: when
the token's row no longer says so (its scope or subject changed in the database), a cookie
replayed afterwards opens nothing, over HTTP and on either database."""

from __future__ import annotations

from pathlib import Path

import httpx
from agent_saga.testing.postgres import scratch_schema, server_for_tests
from agent_saga_server.dashboard.sessions import create_tables, open_session, viewer
from agent_saga_server.store.db import Database, open_database
from agent_saga_server.store.tokens import authenticate, issue
from browser_kit import Dashboard, issue_token


def test_a_session_ends_when_its_tokens_scope_is_lowered(dashboard: Dashboard) -> None:
    token = issue_token(dashboard.home, "approver", "sam")
    sam = httpx.Client(base_url=dashboard.url, trust_env=False, timeout=10)
    try:
        sam.post("/ui/login", data={"token": token}, follow_redirects=True)
        assert sam.get("/ui/approvals").status_code == 200
        db = open_database(None, dashboard.home)
        try:
            caller = authenticate(db, token)
            assert caller is not None
            with db.transaction() as tx:
                tx.execute("UPDATE tokens SET scope = 'auditor' WHERE id = ?", (caller.token_id,))
        finally:
            db.close()
        page = sam.get("/ui/approvals")
        assert page.status_code == 303
        assert page.headers["location"] == "/ui/login"
    finally:
        sam.close()


def _scope_and_subject_bind_the_session(db: Database) -> None:
    try:
        create_tables(db)
        _, info = issue(db, "admin", "ada")
        first, second = (open_session(db, "ada", "admin", info.id) for _ in range(2))
        seen = viewer(db, first)
        assert seen is not None
        assert seen.role == "admin"
        with db.transaction() as tx:
            tx.execute("UPDATE tokens SET scope = 'auditor' WHERE id = ?", (info.id,))
        assert viewer(db, first) is None
        with db.transaction() as tx:
            tx.execute(
                "UPDATE tokens SET scope = 'admin', subject = 'eve' WHERE id = ?", (info.id,)
            )
        assert viewer(db, second) is None
        with db.transaction() as tx:
            tx.execute("UPDATE tokens SET subject = 'ada' WHERE id = ?", (info.id,))
        assert viewer(db, second) is not None
    finally:
        db.close()


def test_scope_and_subject_bind_the_session(tmp_path: Path) -> None:
    _scope_and_subject_bind_the_session(open_database(None, tmp_path))


def test_the_same_on_postgresql(tmp_path: Path) -> None:
    with server_for_tests() as url, scratch_schema(url) as schema:
        _scope_and_subject_bind_the_session(open_database(url, tmp_path, schema=schema))
