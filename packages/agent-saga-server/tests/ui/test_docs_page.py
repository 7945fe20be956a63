"""The API's docs page in a real browser: it renders, and loads nothing from another host."""

from __future__ import annotations

from browser_kit import Dashboard, Guard, guard_page
from playwright.sync_api import Page, expect


def test_the_docs_page_renders_without_leaving_127_0_0_1(dashboard: Dashboard, page: Page) -> None:
    guard = guard_page(page)
    page.goto(f"{dashboard.url}/docs")
    expect(page.locator(".swagger-ui .title").first).to_contain_text("agent-saga control plane")
    assert guard.foreign == []
    assert guard.errors == []


def test_the_guard_sees_a_request_to_another_host(dashboard: Dashboard, page: Page) -> None:
    """The check the other page tests rely on fails when a page reaches out."""

    guard: Guard = guard_page(page)
    page.goto(f"{dashboard.url}/v1/health")
    page.set_content('<img src="https://cdn.example.net/lib.png" alt="">')
    page.wait_for_timeout(200)
    assert any("cdn.example.net" in url for url in guard.foreign), guard.foreign
