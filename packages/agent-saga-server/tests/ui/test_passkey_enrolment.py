"""Who may register a passkey, in chromium with virtual authenticators (CDP ``WebAuthn``) against
a real ``agent-saga ui``: a session opened with a stolen approver token cannot; an admin's
enrolment code registers one passkey, once; a wrong, expired, other subject's, spent or
exhausted code is refused; a second passkey needs an assertion by the first; a revoked passkey's
assertions no longer verify. Every registration and refusal is in the audit trail."""

from __future__ import annotations

import time
from typing import Any

from browser_kit import Dashboard, Guard, enrolment_code
from passkey_browser import (
    AUTHENTICATOR,
    CREATE,
    ES256,
    POST,
    SIGN,
    add_authenticator,
    admin,
    passkeys_of,
    pending_request,
    signed_in,
)
from playwright.sync_api import CDPSession, Page, expect

ENROL = """async ([csrf]) => {
  const post = async (url, body) => {
    const answer = await fetch(url, {method: "POST", body: JSON.stringify(body),
      headers: {"Content-Type": "application/json", "X-CSRF-Token": csrf}});
    return [answer.status, await answer.json()];
  };
  const [, offer] = await post("/ui/passkeys/enrol-options", {});
  const options = PublicKeyCredential.parseRequestOptionsFromJSON(offer.options);
  const proof = await navigator.credentials.get({publicKey: options});
  return {challenge_id: offer.challenge_id, credential: proof.toJSON()};
}"""


def audited(dashboard: Dashboard, subject: str) -> list[dict[str, Any]]:
    """The audit events about ``subject``'s passkeys, oldest first."""
    with admin(dashboard) as client:
        events = client.get("/v1/audit/events", params={"limit": 500, "order": "newest"}).json()
    return [
        e
        for e in reversed(events["events"])
        if e["action"].startswith("passkey.") and e["details"].get("subject") == subject
    ]


def register_with_code(page: Page, code: str) -> None:
    """Register the subject's first passkey in the page (it reloads, listing it)."""
    page.get_by_label("Enrolment code").fill(code)
    page.get_by_role("button", name="Register a passkey").click()
    expect(page.locator("#passkeys li", has_text="used")).to_have_count(1, timeout=15_000)


def enrolled(page: Page, dashboard: Dashboard, subject: str) -> tuple[str, CDPSession, str]:
    """``subject`` signed in with a first passkey (an enrolment code): the page's CSRF token,
    and the authenticator holding the passkey (DevTools session, id)."""
    csrf = signed_in(page, dashboard, subject)
    cdp, authenticator = add_authenticator(page, ES256)
    page.reload()
    register_with_code(page, enrolment_code(dashboard.home, subject))
    return csrf, cdp, authenticator


def test_a_session_opened_with_a_stolen_approver_token_cannot_register_a_passkey(
    dashboard: Dashboard, guarded: tuple[Page, Guard]
) -> None:
    page, guard = guarded
    guard.expected.append("status of 4")
    csrf = signed_in(page, dashboard, "victim")
    cdp, authenticator = add_authenticator(page, ES256)
    page.reload()
    page.get_by_role("button", name="Register a passkey").click()
    expect(page.locator("#passkey-state")).to_have_text(
        "No passkey registered: enter the enrolment code an admin gave you"
    )
    status, answer = page.evaluate(CREATE, [csrf, {}])  # the page's script bypassed
    assert status == 403
    assert answer["detail"] == "registering a passkey needs an enrolment code from an admin"
    status, answer = page.evaluate(POST, ["/ui/passkeys", csrf, {"challenge_id": "x"}])
    assert status == 400
    assert "no such challenge" in answer["detail"]
    made = cdp.send("WebAuthn.getCredentials", {"authenticatorId": authenticator})
    assert made["credentials"] == []  # the authenticator was never asked
    assert passkeys_of(dashboard, "victim") == []
    refused = [(e["action"], e["details"]["stage"]) for e in audited(dashboard, "victim")]
    assert refused == [("passkey.refused", "options"), ("passkey.refused", "register")]


def test_an_enrolment_code_registers_one_passkey_once_and_is_stored_hashed(
    dashboard: Dashboard, guarded: tuple[Page, Guard]
) -> None:
    page, guard = guarded
    guard.expected.append("status of 403")
    with admin(dashboard) as client:
        issued = client.post("/v1/passkeys/enrolments", json={"subject": "sam"})
    assert issued.status_code == 201, issued.text
    code = issued.json()["code"]
    assert issued.json()["expires_at"] - time.time() > 800  # 15 minutes by default
    csrf = signed_in(page, dashboard, "sam")
    add_authenticator(page, ES256)
    page.reload()
    register_with_code(page, code)
    (stored,) = passkeys_of(dashboard, "sam")
    status, answer = page.evaluate(CREATE, [csrf, {"code": code}])
    assert (status, answer["detail"]) == (
        403, "this enrolment code was already used; ask for a new one",
    )  # fmt: skip
    assert len(passkeys_of(dashboard, "sam")) == 1
    database = b"".join(p.read_bytes() for p in dashboard.home.glob("control-plane.sqlite3*"))
    assert code[21:].encode() not in database  # ase_<id>_<secret>: only the secret's hash
    actions = [(e["action"], e["details"].get("grant")) for e in audited(dashboard, "sam")]
    grant = f"code:{issued.json()['id']}"
    assert actions[0] == ("passkey.enrolment", None)
    assert actions[1:] == [("passkey.register", grant), ("passkey.refused", None)]
    assert audited(dashboard, "sam")[1]["details"]["credential"] == stored["credential_id"]


def test_wrong_expired_other_subjects_and_exhausted_codes_are_refused(
    dashboard: Dashboard, guarded: tuple[Page, Guard]
) -> None:
    """Each refusal comes before the authenticator is asked; a registration that fails (a
    credential that does not verify) leaves its code valid for the next one."""
    page, guard = guarded
    guard.expected.append("status of 4")
    csrf = signed_in(page, dashboard, "tess")
    good = enrolment_code(dashboard.home, "tess")
    wrong = good[:21] + ("A" if good[21] != "A" else "B") + good[22:]
    expired = enrolment_code(dashboard.home, "tess", ttl=0.2)
    time.sleep(0.3)
    refusals = {
        "not-a-code": "that is not an enrolment code (ase_...)",
        wrong: "wrong enrolment code",
        enrolment_code(dashboard.home, "uma"): "this enrolment code was issued for another subject",
        expired: "this enrolment code has expired; ask for a new one",
    }
    for code, reason in refusals.items():
        status, answer = page.evaluate(CREATE, [csrf, {"code": code}])
        assert (status, answer["detail"]) == (403, reason)
    exhausted = enrolment_code(dashboard.home, "tess")
    for _ in range(5):
        spoiled = exhausted[:-1] + ("A" if exhausted[-1] != "A" else "B")
        assert page.evaluate(CREATE, [csrf, {"code": spoiled}])[0] == 403
    status, answer = page.evaluate(CREATE, [csrf, {"code": exhausted}])
    assert (status, answer["detail"]) == (
        403, "this enrolment code had too many wrong tries; ask for a new one",
    )  # fmt: skip
    offer = page.evaluate(POST, ["/ui/passkeys/options", csrf, {"code": good}])
    assert offer[0] == 200
    bogus = {"challenge_id": offer[1]["challenge_id"], "credential": {"id": "AA", "type": "x"}}
    status, answer = page.evaluate(POST, ["/ui/passkeys", csrf, bogus])
    assert status == 400
    assert "did not verify" in answer["detail"]
    assert passkeys_of(dashboard, "tess") == []
    add_authenticator(page, ES256)
    page.reload()
    register_with_code(page, good)  # the failed registration did not spend it
    assert len(passkeys_of(dashboard, "tess")) == 1
    events = audited(dashboard, "tess")
    assert [e["action"] for e in events].count("passkey.refused") == 11
    assert [e["action"] for e in events][-1] == "passkey.register"


def test_a_second_passkey_needs_an_assertion_by_the_first(
    dashboard: Dashboard, guarded: tuple[Page, Guard]
) -> None:
    """With no code, the page asks the first passkey for an assertion, then the (other)
    authenticator makes the second; the assertion is one-time and bound to its subject."""
    page, guard = guarded
    guard.expected.append("status of 4")
    csrf, cdp, first = enrolled(page, dashboard, "vic")
    status, answer = page.evaluate(POST, ["/ui/passkeys/options", csrf, {}])
    assert (status, answer["detail"]) == (
        403, "registering a passkey needs an enrolment code from an admin or one of your passkeys",
    )  # fmt: skip
    page.add_init_script("""{
  const create = navigator.credentials.create.bind(navigator.credentials);
  navigator.credentials.create = async (options) => {
    await new Promise((resume) => { window.nextDevice = resume; });
    return create(options);
  };
}""")
    page.reload()
    page.get_by_role("button", name="Register a passkey").click()
    page.wait_for_function("() => typeof window.nextDevice === 'function'")
    # the user turns to another device: the first authenticator leaves (it would refuse to
    # make a second credential for the same account), a new one makes the credential
    cdp.send("WebAuthn.removeVirtualAuthenticator", {"authenticatorId": first})
    added = cdp.send("WebAuthn.addVirtualAuthenticator", {"options": AUTHENTICATOR})
    page.evaluate("() => window.nextDevice()")
    expect(page.locator("#passkeys li", has_text="used")).to_have_count(2, timeout=15_000)
    (firsts, seconds) = passkeys_of(dashboard, "vic")
    assert firsts["sign_count"] >= 1  # it signed the enrolment assertion
    second = {"authenticatorId": added["authenticatorId"]}
    (made,) = cdp.send("WebAuthn.getCredentials", second)["credentials"]
    assert bytes.fromhex(seconds["credential_id"]) == _b64(made["credentialId"])
    register = [e for e in audited(dashboard, "vic") if e["action"] == "passkey.register"]
    assert register[-1]["details"]["grant"] == f"passkey:{firsts['credential_id']}"


def test_an_enrol_assertion_is_one_time_and_bound_to_its_subject(
    dashboard: Dashboard, guarded: tuple[Page, Guard]
) -> None:
    page, guard = guarded
    guard.expected.append("status of 40")
    csrf, _, _ = enrolled(page, dashboard, "wes")
    proof: dict[str, Any] = page.evaluate(ENROL, [csrf])
    other = page.context.browser.new_context()  # type: ignore[union-attr]
    try:
        intruder = other.new_page()
        intruder_csrf = signed_in(intruder, dashboard, "xan")
        status, answer = intruder.evaluate(
            POST, ["/ui/passkeys/options", intruder_csrf, {"assertion": proof}]
        )
        assert (status, answer["detail"]) == (403, "no such challenge for this session")
    finally:
        other.close()
    first = page.evaluate(POST, ["/ui/passkeys/options", csrf, {"assertion": proof}])
    assert first[0] == 200
    status, answer = page.evaluate(POST, ["/ui/passkeys/options", csrf, {"assertion": proof}])
    assert status == 403
    assert "already used" in answer["detail"]
    assert passkeys_of(dashboard, "xan") == []


def test_a_revoked_passkeys_assertions_no_longer_count(
    dashboard: Dashboard, guarded: tuple[Page, Guard]
) -> None:
    page, guard = guarded
    guard.expected.append("status of 403")
    enrolled(page, dashboard, "rita")
    pending = pending_request(dashboard, "passkey-revoked", 77)
    page.goto(f"{dashboard.named_url}/ui/approvals")
    csrf = page.locator("input[name=csrf]").first.get_attribute("value")
    base = f"{dashboard.named_url}/ui/approvals/{pending}"
    signed: dict[str, Any] = page.evaluate(SIGN, [base, csrf, "approve"])
    (key,) = passkeys_of(dashboard, "rita")
    with admin(dashboard) as client:
        assert client.delete(f"/v1/passkeys/{key['credential_id']}").status_code == 204
        gone = client.delete(f"/v1/passkeys/{key['credential_id']}")
        assert gone.status_code == 404
    status, answer = page.evaluate(POST, [f"{base}/passkey", csrf, signed])
    assert (status, answer["detail"]) == (403, "the credential is not one of rita's passkeys")
    with admin(dashboard) as client:
        request = client.get(f"/v1/approvals/{pending}").json()
    assert (request["status"], request["votes"]) == ("pending", [])
    assert passkeys_of(dashboard, "rita") == []
    assert audited(dashboard, "rita")[-1]["action"] == "passkey.revoke"


FINISH = """async ([csrf, offer]) => {
  const options = PublicKeyCredential.parseCreationOptionsFromJSON(offer.options);
  const made = await navigator.credentials.create({publicKey: options});
  const answer = await fetch("/ui/passkeys", {method: "POST",
    body: JSON.stringify({challenge_id: offer.challenge_id, credential: made.toJSON()}),
    headers: {"Content-Type": "application/json", "X-CSRF-Token": csrf}});
  return [answer.status, await answer.json()];
}"""


def test_a_passkey_revoked_while_it_enrols_another_registers_nothing(
    dashboard: Dashboard, guarded: tuple[Page, Guard]
) -> None:
    """The first passkey's assertion was accepted and the browser is making the second when an
    admin revokes the first: the grant is checked again where the passkey would be stored."""
    page, guard = guarded
    guard.expected.append("status of 40")
    csrf, cdp, authenticator = enrolled(page, dashboard, "rev")
    proof: dict[str, Any] = page.evaluate(ENROL, [csrf])
    status, offer = page.evaluate(POST, ["/ui/passkeys/options", csrf, {"assertion": proof}])
    assert status == 200, offer
    cdp.send("WebAuthn.removeVirtualAuthenticator", {"authenticatorId": authenticator})
    cdp.send("WebAuthn.addVirtualAuthenticator", {"options": AUTHENTICATOR})  # a new device
    (first,) = passkeys_of(dashboard, "rev")
    with admin(dashboard) as client:
        assert client.delete(f"/v1/passkeys/{first['credential_id']}").status_code == 204
    status, answer = page.evaluate(FINISH, [csrf, offer])
    assert (status, answer["detail"]) == (
        400, "the passkey that allowed this registration was revoked",
    )  # fmt: skip
    assert passkeys_of(dashboard, "rev") == []
    status, answer = page.evaluate(POST, ["/ui/passkeys/options", csrf, {"assertion": proof}])
    assert status == 403  # nor can its old assertion be used again


def _b64(text: str) -> bytes:
    import base64

    return base64.b64decode(text + "=" * (-len(text) % 4))
