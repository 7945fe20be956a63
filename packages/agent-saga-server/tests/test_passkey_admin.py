"""Passkey enrolment codes and passkeys for admins: ``agent-saga cloud-server passkeys``, the
``/v1/passkeys`` routes (a real server process on 127.0.0.1), and the codes' rules in the
store on SQLite and on PostgreSQL (one-time, bound to a subject, expiring, bounded tries)."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest
from agent_saga.cli import main
from agent_saga.testing.postgres import scratch_schema, server_for_tests
from agent_saga_server.dashboard.enrolment import (
    MAX_FAILURES,
    EnrolmentRefused,
    check_code,
    issue_code,
    list_passkeys,
    spend_grant,
)
from agent_saga_server.dashboard.passkeys import create_tables
from agent_saga_server.store.db import Database, open_database
from click.testing import CliRunner
from plane_testkit import RunningServer

CODE = re.compile(r"ase_([0-9a-f]{16})_([A-Za-z0-9_-]{43})")


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def _store_passkey(db: Database, subject: str, credential_id: str) -> None:
    with db.transaction() as tx:
        tx.execute(
            "INSERT INTO ui_passkeys (credential_id, subject, public_key, sign_count, "
            "created_at) VALUES (?, ?, ?, 0, ?)",
            (credential_id, subject, "00", time.time()),
        )


def test_the_cli_prints_a_code_once_lists_and_revokes_passkeys(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    code, out, err = run("--home", home, "cloud-server", "passkeys", "enrol", "unix:ann")
    assert code == 0, err
    found = CODE.fullmatch(out.strip())
    assert found is not None, out
    assert "enrolment code for unix:ann, valid until" in err
    stored = (tmp_path / "home" / "control-plane.sqlite3").read_bytes()
    assert found.group(2).encode() not in stored  # only the secret's SHA-256
    db = open_database(None, Path(home))
    try:
        assert check_code(db, out.strip(), "unix:ann") == found.group(1)
        _store_passkey(db, "unix:ann", "c0ffee")
    finally:
        db.close()
    code, out, _ = run("--home", home, "cloud-server", "passkeys", "list")
    assert code == 0
    assert out.startswith("c0ffee  unix:ann  ")
    assert run("--home", home, "cloud-server", "passkeys", "revoke", "c0ffee")[0] == 0
    listed = run("--home", home, "cloud-server", "passkeys", "list", "--subject", "unix:ann")
    assert listed == (0, "", "no passkeys of unix:ann\n")  # said, on stderr only
    code, _, err = run("--home", home, "cloud-server", "passkeys", "revoke", "c0ffee")
    assert (code, err.strip()) == (1, "Error: no passkey c0ffee")
    code, _, err = run(
        "--home", home, "cloud-server", "passkeys", "enrol", "x", "--expires-in", "5"
    )
    assert code == 2
    assert "5 is not in the range 60<=x<=604800" in err


def test_the_api_issues_codes_to_admins_only_and_revokes_passkeys(server: RunningServer) -> None:
    admin, approver = server.admin, server.token("approver", "ann-api")
    assert admin is not None
    body = {"subject": "ann-api", "expires_in": 120}
    with server.client(approver) as client:
        assert client.post("/v1/passkeys/enrolments", json=body).status_code == 403
    db = open_database(None, server.home)
    try:
        with server.client(admin) as client:
            issued = client.post("/v1/passkeys/enrolments", json=body)
            assert issued.status_code == 201, issued.text
            assert 110 < issued.json()["expires_at"] - time.time() <= 120
            assert check_code(db, issued.json()["code"], "ann-api") == issued.json()["id"]
            short = client.post(
                "/v1/passkeys/enrolments", json={"subject": "ann-api", "expires_in": 1}
            )
            assert short.status_code == 400
            _store_passkey(db, "ann-api", "beef")
            listed = client.get("/v1/passkeys", params={"subject": "ann-api"})
            assert [p["credential_id"] for p in listed.json()["passkeys"]] == ["beef"]
            assert client.delete("/v1/passkeys/beef").status_code == 204
            assert client.delete("/v1/passkeys/beef").status_code == 404
            events = client.get("/v1/audit/events", params={"limit": 500}).json()["events"]
        mine = [
            e
            for e in events
            if e["action"].startswith("passkey.") and e["details"].get("subject") == "ann-api"
        ]
        assert [e["action"] for e in mine] == ["passkey.enrolment", "passkey.revoke"]
        assert mine[1]["scope"] == "admin"
        assert list_passkeys(db, "ann-api") == []
    finally:
        db.close()


def _codes_follow_their_rules(db: Database) -> None:
    try:
        create_tables(db)
        with db.transaction() as tx:
            code = issue_code(tx, "ann", "test")
            other = issue_code(tx, "bob", "test")
            short = issue_code(tx, "ann", "test", ttl=0.05)
        time.sleep(0.1)
        refusals = {
            (code.code[:-1] + ("A" if code.code[-1] != "A" else "B"), "ann"): "wrong",
            (other.code, "ann"): "another subject",
            (short.code, "ann"): "expired",
            ("asl_" + code.code[4:], "ann"): "not an enrolment code",
        }
        for (presented, subject), reason in refusals.items():
            with pytest.raises(EnrolmentRefused, match=reason):
                check_code(db, presented, subject)
        grant = f"code:{check_code(db, code.code, 'ann')}"
        with pytest.raises(EnrolmentRefused, match="revoked"), db.transaction() as tx:
            spend_grant(tx, "passkey:feed", "ann", "c1")
        with pytest.raises(EnrolmentRefused, match="used meanwhile"), db.transaction() as tx:
            spend_grant(tx, grant, "bob", "c1")
        with db.transaction() as tx:
            spend_grant(tx, grant, "ann", "c1")
        with pytest.raises(EnrolmentRefused, match="already used"):
            check_code(db, code.code, "ann")
        with pytest.raises(EnrolmentRefused, match="used meanwhile"), db.transaction() as tx:
            spend_grant(tx, grant, "ann", "c2")  # a second registration racing the first
        for _ in range(MAX_FAILURES - 1):  # bob's code: one failure from "another subject"
            with pytest.raises(EnrolmentRefused, match="wrong"):
                check_code(db, other.code[:-1] + ("A" if other.code[-1] != "A" else "B"), "bob")
        with pytest.raises(EnrolmentRefused, match="too many wrong tries"):
            check_code(db, other.code, "bob")
    finally:
        db.close()


def test_codes_are_one_time_bound_expiring_and_bounded_on_sqlite(tmp_path: Path) -> None:
    _codes_follow_their_rules(open_database(None, tmp_path))


def test_the_same_on_postgresql(tmp_path: Path) -> None:
    with server_for_tests() as url, scratch_schema(url) as schema:
        _codes_follow_their_rules(open_database(url, tmp_path, schema=schema))


def _two_registrations_race_for_one_code(db: Database) -> dict[str, str]:
    """Two registrations spend one code at once: the first holds its transaction open while
    the second tries; what each ended with."""
    try:
        create_tables(db)
        with db.transaction() as tx:
            grant = f"code:{issue_code(tx, 'ann', 'test').id}"
        inside, release, ended = threading.Event(), threading.Event(), {}

        def register(credential: str, hold: bool) -> None:
            try:
                with db.transaction() as tx:
                    spend_grant(tx, grant, "ann", credential)
                    if hold:
                        inside.set()
                        release.wait(10)
                ended[credential] = "stored"
            except EnrolmentRefused as exc:
                ended[credential] = str(exc)

        first = threading.Thread(target=register, args=("c1", True))

        def second_once_the_first_holds_the_code() -> None:
            inside.wait(10)
            register("c2", False)

        second = threading.Thread(target=second_once_the_first_holds_the_code)
        first.start()
        second.start()
        inside.wait(10)
        time.sleep(0.2)  # the second is waiting for the first's lock on the code
        release.set()
        first.join(10)
        second.join(10)
        return ended
    finally:
        db.close()


def test_two_registrations_racing_for_one_code_store_one_passkey(tmp_path: Path) -> None:
    expected = {"c1": "stored", "c2": "the enrolment code was used meanwhile; ask for a new one"}
    assert _two_registrations_race_for_one_code(open_database(None, tmp_path)) == expected
    with server_for_tests() as url, scratch_schema(url) as schema:
        db = open_database(url, tmp_path, schema=schema)
        assert _two_registrations_race_for_one_code(db) == expected


def test_no_scope_but_admin_reaches_the_passkey_admin_routes(server: RunningServer) -> None:
    tokens = {
        "agent": server.token("agent", "bot-pk", origin="host-pk"),
        "approver": server.token("approver", "ann-pk"),
        "auditor": server.token("auditor", "aud-pk"),
        "none": None,
    }
    db = open_database(None, server.home)
    try:
        _store_passkey(db, "ann-pk", "d00d")
        for name, token in tokens.items():
            with server.client(token) as client:
                answers = [
                    client.post("/v1/passkeys/enrolments", json={"subject": "ann-pk"}),
                    client.get("/v1/passkeys"),
                    client.delete("/v1/passkeys/d00d"),
                ]
            expected = 401 if token is None else 403
            assert [a.status_code for a in answers] == [expected] * 3, (name, answers)
        assert [p.credential_id for p in list_passkeys(db, "ann-pk")] == ["d00d"]
    finally:
        db.close()


@pytest.mark.parametrize("subject", ["ann\nroot", "ann ", "", "ünï", "a" * 129, ".ann"])
def test_the_cli_refuses_a_subject_no_session_can_have_in_one_line(
    tmp_path: Path, subject: str
) -> None:
    """Subjects follow the tokens' rule (as the API's ``subject`` does): a code for ``ann ``
    or ``ann\\nroot`` could never be used, and a newline would split the CLI's line."""
    home = str(tmp_path / "home")
    code, out, err = run("--home", home, "cloud-server", "passkeys", "enrol", subject)
    assert (code, out) == (2, "")  # a usage error, as click gives for any bad argument
    assert err.startswith("Error: "), err
    assert err.count("\n") == 1, err
    assert "subject" in err.lower()
