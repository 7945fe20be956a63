"""The kill switch and budget gauges in chromium: halting from the page (behind a reason and a
confirmation) stops an agent of the fleet, resuming lets it act again; a reservation moves its
budget's gauge."""

from __future__ import annotations

import time
from decimal import Decimal
from pathlib import Path

import pytest
from agent_saga import AgentKit, HaltedError, SagaRolledBack
from browser_kit import Dashboard, Guard, Snap, issue_token
from playwright.sync_api import Page, expect


def turn(angle: int) -> int:
    return angle


def wait_refusing(kit: AgentKit, halted: bool) -> None:
    """Run a step until the agent's answer matches ``halted`` (the push takes a moment)."""
    step = kit.tool(name="arm.move", compensate=lambda angle: None)(turn)
    deadline = time.monotonic() + 5
    while True:
        try:
            with kit.transaction("move"):
                step(angle=10)
            refused = False
        except (HaltedError, SagaRolledBack):  # refused at entry, or at the step
            refused = True
        if refused == halted:
            return
        assert time.monotonic() < deadline, f"the agent never {'stopped' if halted else 'resumed'}"
        time.sleep(0.05)


def test_halt_from_the_page_stops_an_agent_and_resume_lets_it_act(
    dashboard: Dashboard, guarded: tuple[Page, Guard], tmp_path: Path, snap: Snap
) -> None:
    page, _ = guarded
    token = issue_token(dashboard.home, "agent", "arm-1")
    kit = AgentKit(home=tmp_path / "agent", server=dashboard.url, token=token)
    try:
        wait_refusing(kit, halted=False)
        dashboard.login(page, "ann", "admin")
        page.get_by_role("link", name="Kill switch and budgets").click()
        expect(page.locator("#switch-state")).to_contain_text("RUNNING")
        page.get_by_label("Reason").fill("arm <b>jammed</b>")
        page.get_by_role("button", name="Halt").click()  # the browser wants the confirmation
        expect(page.locator("#switch-state")).to_contain_text("RUNNING")
        page.get_by_label("Yes, stop every agent now").check()
        page.get_by_role("button", name="Halt").click()
        expect(page.locator("#switch-state")).to_contain_text("HALTED")
        expect(page.locator("#switch-state")).to_contain_text("arm <b>jammed</b>")
        snap(page, "kill-switch-halted")
        wait_refusing(kit, halted=True)
        page.get_by_label("Reason").fill("arm fixed")
        page.get_by_label("Yes, let every agent act again").check()
        page.get_by_role("button", name="Resume").click()
        expect(page.locator("#switch-state")).to_contain_text("RUNNING")
        wait_refusing(kit, halted=False)
    finally:
        kit.close()


def test_a_form_without_the_confirmation_changes_nothing(
    dashboard: Dashboard, guarded: tuple[Page, Guard]
) -> None:
    page, _ = guarded
    dashboard.login(page, "ann", "admin")
    page.goto(f"{dashboard.url}/ui/control")
    csrf = page.locator("input[name=csrf]").first.get_attribute("value") or ""
    answer = page.request.post(
        f"{dashboard.url}/ui/control/halt", form={"csrf": csrf, "reason": "no box ticked"}
    )
    assert "tick the box" in answer.text()
    page.goto(f"{dashboard.url}/ui/control")
    expect(page.locator("#switch-state")).to_contain_text("RUNNING")


def test_a_reservation_moves_the_budget_gauge(
    dashboard: Dashboard, guarded: tuple[Page, Guard], snap: Snap
) -> None:
    from agent_saga_server.store.budgets import reserve, set_cap
    from agent_saga_server.store.db import open_database

    page, _ = guarded
    db = open_database(None, dashboard.home)
    try:
        set_cap(db, "ads <i>spend</i>", Decimal(200))
        dashboard.login(page, "ann", "auditor")
        page.goto(f"{dashboard.url}/ui/control")
        row = page.locator("#budgets tr", has_text="ads <i>spend</i>")
        expect(row.locator(".held")).to_have_text("0")
        expect(row.locator("meter")).to_have_attribute("value", "0")
        reserve(
            db, "ads <i>spend</i>", hold_id="h-1", account="all", amount=Decimal(50),
            limit=Decimal(200), origin="ads-bot", saga="s-1", ordinal=1, keep_spent=True,
            until=None,
        )  # fmt: skip
        page.reload()
        expect(row.locator(".held")).to_have_text("50")
        expect(row.locator("meter")).to_have_attribute("value", "25")
        snap(page, "budgets")
        assert page.get_by_role("button", name="Halt").count() == 0  # an auditor cannot halt
    finally:
        db.close()


@pytest.mark.parametrize("role", ["auditor", "approver"])
def test_only_an_admin_session_may_use_the_kill_switch(
    dashboard: Dashboard, guarded: tuple[Page, Guard], role: str
) -> None:
    page, _ = guarded
    dashboard.login(page, "eve", role)
    csrf = page.locator("input[name=csrf]").first.get_attribute("value") or ""
    answer = page.request.post(
        f"{dashboard.url}/ui/control/halt",
        form={"csrf": csrf, "reason": "x", "confirm": "yes"},
    )
    assert answer.status == 403
