"""The login link, the sagas list and a saga's timeline, driven in chromium like a user."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from agent_saga import AgentKit, SagaRolledBack
from browser_kit import Dashboard, Guard, Snap
from playwright.sync_api import Page, expect

HOSTILE_TOOL = "<img src=x onerror=alert(1)>"
HOSTILE_SAGA = "<script>alert('saga')</script>"


def echo(order: str) -> str:
    return order


def run_sagas(home: Path, body: Callable[[AgentKit], None]) -> None:
    """Run ``body`` against a kit on the dashboard's home (the ui ships its log)."""
    kit = AgentKit(home=home)
    try:
        body(kit)
    finally:
        kit.close()


def wait_listed(page: Page, dashboard: Dashboard, text: str, query: str = "") -> None:
    """Reload the sagas page until ``text`` is listed (shipping runs in the background)."""
    deadline = time.monotonic() + 15
    while True:
        page.goto(f"{dashboard.url}/ui/sagas{query}")
        if text in page.locator("#sagas").inner_text():
            return
        assert time.monotonic() < deadline, f"{text!r} never listed"
        time.sleep(0.2)


def test_the_login_link_sets_a_strict_http_only_cookie_and_works_once(
    dashboard: Dashboard, guarded: tuple[Page, Guard]
) -> None:
    page, guard = guarded
    link = dashboard.login_link("ann", "admin")
    page.goto(link)
    assert page.url == f"{dashboard.url}/ui/sagas"
    expect(page.locator(".who")).to_have_text("ann (admin)")
    [cookie] = page.context.cookies()
    assert (cookie["name"], cookie["httpOnly"], cookie["sameSite"]) == ("asg_ui", True, "Strict")
    assert page.evaluate("document.cookie") == ""  # out of reach of scripts
    secret = link.split("token=asl_", 1)[1].split("_", 1)[1]  # asl_<hex id>_<secret>
    assert len(secret) == 43
    stored = b"".join(p.read_bytes() for p in dashboard.home.glob("control-plane.sqlite3*"))
    assert secret.encode() not in stored  # only its hash is kept
    page.context.clear_cookies()
    guard.expected.append("401")
    page.goto(link)  # spent
    expect(page.locator(".problem")).to_contain_text("already used")
    assert page.context.cookies() == []


def test_the_printed_link_logs_in_and_a_pasted_token_does_too(
    dashboard: Dashboard, guarded: tuple[Page, Guard], snap: Snap
) -> None:
    page, _ = guarded
    assert dashboard.first_link.startswith(f"{dashboard.url}/ui/login?token=asl_")
    page.goto(f"{dashboard.url}/ui/sagas")
    assert page.url == f"{dashboard.url}/ui/login"  # no session yet
    snap(page, "login")
    token = dashboard.login_link("bob", "auditor").split("token=")[1]
    page.get_by_label("Token").fill(token)
    page.get_by_role("button", name="Log in").click()
    expect(page.locator(".who")).to_have_text("bob (auditor)")
    page.get_by_role("button", name="Log out").click()
    assert page.url == f"{dashboard.url}/ui/login"
    page.goto(f"{dashboard.url}/ui/sagas")
    assert page.url == f"{dashboard.url}/ui/login"


def test_the_list_shows_filters_and_pages_the_sagas(
    dashboard: Dashboard, guarded: tuple[Page, Guard], snap: Snap
) -> None:
    page, _ = guarded

    def work(kit: AgentKit) -> None:
        @kit.tool(name="list.note", compensate=lambda n: None)
        def note(n: int) -> int:
            return n

        for i in range(52):
            with kit.transaction(f"list-ok-{i:02d}"):
                note(i)
        try:
            with kit.transaction("list-broken"):
                note(-1)
                raise RuntimeError("downstream failed")
        except SagaRolledBack:
            pass

    run_sagas(dashboard.home, work)
    dashboard.login(page)
    wait_listed(page, dashboard, "list-broken")
    rows = page.locator("#sagas tbody tr")
    expect(rows).to_have_count(50)
    snap(page, "sagas")
    first = rows.first.inner_text()
    assert "list-broken" in first
    assert "rolled_back" in first
    assert "list.note" in first
    assert "local" in first
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", first)
    page.get_by_role("link", name="Older sagas").click()
    older = page.locator("#sagas").inner_text()
    assert "list-ok-00" in older
    assert "list-broken" not in older
    page.goto(f"{dashboard.url}/ui/sagas")
    page.get_by_label("Status").select_option("rolled_back")
    page.get_by_role("button", name="Filter").click()
    assert "status=rolled_back" in page.url
    names = page.locator("#sagas tbody tr td:first-child a").all_inner_texts()
    assert "list-broken" in names
    assert not any(n.startswith("list-ok") for n in names)


def test_a_rolled_back_saga_shows_each_step_and_its_compensations_newest_first(
    dashboard: Dashboard, guarded: tuple[Page, Guard], snap: Snap
) -> None:
    page, _ = guarded

    def saga(kit: AgentKit) -> None:
        wrappers = []
        for name in ("tl.reserve", "tl.charge", "tl.ship"):
            wrappers.append(kit.tool(name=name, compensate=lambda order: None)(echo))
        try:
            with kit.transaction("timeline-rollback"):
                for call in wrappers:
                    call(order="o-7")
                raise RuntimeError("carrier refused")
        except SagaRolledBack:
            pass

    run_sagas(dashboard.home, saga)
    dashboard.login(page)
    wait_listed(page, dashboard, "timeline-rollback")
    page.get_by_role("link", name="timeline-rollback").click()
    expect(page.locator("#saga-status")).to_have_text("rolled_back")
    snap(page, "saga-timeline")
    tools = page.locator("#steps .tool").all_inner_texts()
    assert tools == ["tl.reserve", "tl.charge", "tl.ship"]
    outcomes = page.locator("#steps .compensation").all_inner_texts()
    assert all(o.startswith("compensated") for o in outcomes), outcomes
    order = page.locator(".compensations li").all_inner_texts()
    assert [re.search(r"step (\d)", o).group(1) for o in order] == ["3", "2", "1"]  # type: ignore[union-attr]
    assert "RuntimeError: carrier refused" in page.locator(".facts").inner_text()
    assert "chain checked on arrival" in page.locator("#verification").inner_text()
    expect(page.locator("#bundle")).to_have_attribute("href", re.compile(r"/bundle\.json$"))


def test_hostile_saga_and_tool_names_render_as_text(
    dashboard: Dashboard, guarded: tuple[Page, Guard]
) -> None:
    page, _ = guarded

    def saga(kit: AgentKit) -> None:
        hostile = kit.tool(name=HOSTILE_TOOL, compensate=lambda order: None)(echo)
        with kit.transaction(HOSTILE_SAGA):
            hostile(order="<b onmouseover=alert(2)>bold</b>")

    run_sagas(dashboard.home, saga)
    dashboard.login(page)
    wait_listed(page, dashboard, HOSTILE_SAGA)
    expect(page.get_by_role("link", name=HOSTILE_SAGA)).to_be_visible()
    assert HOSTILE_TOOL in page.locator("#sagas").inner_text()
    page.get_by_role("link", name=HOSTILE_SAGA).click()
    expect(page.locator("#saga-name")).to_have_text(HOSTILE_SAGA)
    expect(page.locator("#steps .tool")).to_have_text(HOSTILE_TOOL)
    assert "<b onmouseover=alert(2)>bold</b>" in page.locator("#steps pre").inner_text()
    assert page.locator("main img, main b, main script").count() == 0


def test_a_foreign_host_a_missing_cookie_and_a_missing_csrf_token_are_refused(
    dashboard: Dashboard, page: Page
) -> None:
    with httpx.Client(base_url=dashboard.url, trust_env=False) as client:
        foreign = client.get("/ui/sagas", headers={"host": "rebound.example:80"})
        assert foreign.status_code == 421
        script = client.get("/ui/static/dashboard.js", headers={"host": "rebound.example"})
        assert script.status_code == 421
        assert client.get("/ui/static/dashboard.js").status_code == 200
        assert client.get("/ui/sagas").headers["location"] == "/ui/login"
        assert client.post("/ui/logout", data={"csrf": "x"}).status_code == 401
    dashboard.login(page)
    cookie = page.context.cookies()[0]["value"]
    with httpx.Client(base_url=dashboard.url, trust_env=False) as client:
        client.cookies.set("asg_ui", cookie, path="/ui")
        assert client.get("/ui/sagas").status_code == 200
        assert client.post("/ui/logout", data={}).status_code == 403
        assert client.post("/ui/logout", data={"csrf": "0" * 64}).status_code == 403
        other = {"origin": "https://evil.example"}
        csrf = page.locator("input[name=csrf]").first.get_attribute("value")
        assert client.post("/ui/logout", data={"csrf": csrf}, headers=other).status_code == 403
        assert client.get("/ui/sagas").status_code == 200  # still logged in


def test_pages_carry_a_strict_content_security_policy(dashboard: Dashboard) -> None:
    with httpx.Client(base_url=dashboard.url, trust_env=False) as client:
        answer = client.get("/ui/login")
    policy = answer.headers["content-security-policy"]
    assert "script-src 'self';" in policy
    assert "unsafe-inline" not in policy
    assert "default-src 'none'" in policy
    assert "frame-ancestors 'none'" in policy
    assert "<script>" not in answer.text  # no inline script
