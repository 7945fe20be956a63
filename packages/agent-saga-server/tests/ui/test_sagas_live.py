"""The sagas list updates itself: a saga that starts appears on top without a reload, its status
changes in place when it ends, names stay text, and a filtered page adds only what matches."""

from __future__ import annotations

import threading

import httpx
from agent_saga import AgentKit
from browser_kit import Dashboard, Guard
from playwright.sync_api import Page, expect

HOSTILE = "<img src=x onerror=alert('list')>"


def note(text: str) -> str:
    return text


def test_a_new_saga_appears_and_its_status_changes_without_a_reload(
    dashboard: Dashboard, guarded: tuple[Page, Guard]
) -> None:
    page, _ = guarded
    dashboard.login(page)
    expect(page.locator("#sagas-live")).to_contain_text("live")
    page.evaluate("() => { window.notReloaded = true; }")
    release = threading.Event()
    kit = AgentKit(home=dashboard.home)
    step = kit.tool(name="list.note", compensate=lambda text: None)(note)

    def agent() -> None:
        with kit.transaction(HOSTILE):
            step(text="started")
            release.wait(20)

    thread = threading.Thread(target=agent, name="live-list-agent")
    thread.start()
    try:
        row = page.locator("#sagas tbody tr", has_text=HOSTILE)
        expect(row.locator(".status")).to_have_text("running", timeout=10_000)
        expect(page.locator("#sagas tbody tr").first).to_contain_text(HOSTILE)
        expect(row).to_contain_text("1: list.note")
        release.set()
        thread.join(20)
        expect(row.locator(".status")).to_have_text("committed", timeout=10_000)
        assert page.evaluate("() => window.notReloaded") is True
        assert page.locator("main img").count() == 0  # the name stayed text
        href = row.locator("a").get_attribute("href") or ""
        assert href.startswith("/ui/sagas/local/")
        page.goto(f"{dashboard.url}{href}")
        expect(page.locator("h1")).to_contain_text(HOSTILE)
    finally:
        release.set()
        thread.join(20)
        kit.close()


def test_a_filtered_page_adds_only_matching_sagas(
    dashboard: Dashboard, guarded: tuple[Page, Guard]
) -> None:
    page, _ = guarded
    dashboard.login(page)
    page.goto(f"{dashboard.url}/ui/sagas?tool=list.other")
    expect(page.locator("#sagas-live")).to_contain_text("live")
    with AgentKit(home=dashboard.home) as kit:
        plain = kit.tool(name="list.plain", compensate=lambda text: None)(note)
        other = kit.tool(name="list.other", compensate=lambda text: None)(note)
        with kit.transaction("filtered-out"):
            plain(text="a")
        with kit.transaction("filtered-in"):
            other(text="b")
    expect(page.locator("#sagas tbody tr", has_text="filtered-in")).to_have_count(1)
    assert page.locator("#sagas tbody tr", has_text="filtered-out").count() == 0


def test_the_stream_needs_a_session(dashboard: Dashboard) -> None:
    with httpx.Client(base_url=dashboard.url, trust_env=False) as anonymous:
        assert anonymous.get("/ui/sagas-stream").status_code == 401
