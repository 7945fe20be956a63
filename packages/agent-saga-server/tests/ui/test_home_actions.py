"""``agent-saga ui`` on a plain home acts on what the home's kits read: the page's approval
reaches an agent of the home waiting on an IRREVERSIBLE step (it runs once, a denial means
never), and the page's halt stops an agent of the home (its ``HALT`` file), resume frees it."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from agent_saga import IRREVERSIBLE, AgentKit, Approvals, HaltedError, SagaRolledBack
from browser_kit import MARKUP, Dashboard, Guard, wait_for_request
from playwright.sync_api import Page, expect


def start_home_agent(
    dashboard: Dashboard, approver: str
) -> tuple[threading.Thread, dict[str, Any]]:
    """An agent on the dashboard's own home (no server): its wire waits for ``approver``."""
    kit = AgentKit(home=dashboard.home, approvals=Approvals(approvers=[approver], poll=0.02))
    seen: dict[str, Any] = {"wires": 0, "error": None, "kit": kit}

    @kit.tool(name="bank.wire", semantics=IRREVERSIBLE)
    def wire(to: str, amount: int) -> str:
        seen["wires"] += 1
        return f"{amount} to {to}"

    def agent() -> None:
        try:
            with kit.transaction("home payout"):
                wire(to=MARKUP, amount=700)
        except Exception as exc:  # a denial ends the saga; the test reads which
            seen["error"] = type(exc).__name__

    thread = threading.Thread(target=agent, name="home-agent")
    thread.start()
    return thread, seen


def test_the_page_approves_a_step_an_agent_of_the_home_waits_on(
    dashboard: Dashboard, guarded: tuple[Page, Guard]
) -> None:
    page, _ = guarded
    dashboard.login(page, "unix:hana", "approver")
    thread, seen = start_home_agent(dashboard, "unix:hana")
    try:
        request = wait_for_request(page, dashboard, "local")
        assert MARKUP in request.locator(".args").inner_text()
        assert seen["wires"] == 0  # still waiting
        request.get_by_label("Note").fill("home wire checked")
        request.get_by_role("button", name="Approve").click()
        expect(page.locator("#decided")).to_contain_text("is now approved")
        thread.join(20)
        assert not thread.is_alive()
        assert (seen["wires"], seen["error"]) == (1, None)  # ran once
        votes = [r for r in seen["kit"].store.records() if r.kind == "approval.vote"]
        assert [(v.data["by"], v.data["note"]) for v in votes][-1:] == [
            ("unix:hana", "home wire checked")
        ]
    finally:
        thread.join(20)
        seen["kit"].close()


def test_a_denial_from_the_page_means_the_home_agent_never_runs_the_step(
    dashboard: Dashboard, guarded: tuple[Page, Guard]
) -> None:
    page, _ = guarded
    dashboard.login(page, "unix:hana", "approver")
    thread, seen = start_home_agent(dashboard, "unix:hana")
    try:
        request = wait_for_request(page, dashboard, "local")
        request.get_by_role("button", name="Deny").click()
        expect(page.locator("#decided")).to_contain_text("is now denied")
        thread.join(20)
        assert (seen["wires"], seen["error"]) == (0, "SagaRolledBack")
    finally:
        thread.join(20)
        seen["kit"].close()


def test_an_approver_the_request_does_not_name_is_refused(
    dashboard: Dashboard, guarded: tuple[Page, Guard]
) -> None:
    page, guard = guarded
    guard.expected.append("status of 409")  # the refusal's answer
    dashboard.login(page, "unix:mallory", "approver")
    thread, seen = start_home_agent(dashboard, "unix:hana")
    try:
        request = wait_for_request(page, dashboard, "local")
        request.get_by_role("button", name="Approve").click()
        expect(page.locator(".problem")).to_contain_text("unix:mallory")
        assert seen["wires"] == 0
        dashboard.login(page, "unix:hana", "approver")
        wait_for_request(page, dashboard, "local").get_by_role("button", name="Deny").click()
        thread.join(20)
        assert seen["wires"] == 0
    finally:
        thread.join(20)
        seen["kit"].close()


def turn(angle: int) -> int:
    return angle


def test_halt_from_the_page_stops_a_running_agent_of_the_home(
    dashboard: Dashboard, guarded: tuple[Page, Guard]
) -> None:
    page, _ = guarded
    kit = AgentKit(home=dashboard.home)
    moves: list[int] = []
    outcome: dict[str, str] = {}
    stop = threading.Event()
    step = kit.tool(name="arm.move", compensate=lambda angle: None)(turn)

    def agent() -> None:  # moves until the switch stops it
        try:
            with kit.transaction("home arm"):
                while not stop.is_set():
                    moves.append(step(angle=len(moves)))
                    time.sleep(0.02)
        except (HaltedError, SagaRolledBack) as exc:
            outcome["error"] = type(exc).__name__

    thread = threading.Thread(target=agent, name="home-arm")
    thread.start()
    try:
        dashboard.login(page, "ann", "admin")
        page.goto(f"{dashboard.url}/ui/control")
        deadline = time.monotonic() + 10
        while len(moves) < 3:
            assert time.monotonic() < deadline, "the agent never moved"
            time.sleep(0.02)
        page.get_by_label("Reason").fill("arm <b>jammed</b>")
        page.get_by_label("Yes, stop every agent now").check()
        page.get_by_role("button", name="Halt").click()
        expect(page.locator("#switch-state")).to_contain_text("HALTED")
        thread.join(10)
        assert not thread.is_alive(), "the agent of the home kept running"
        assert outcome.get("error") in ("HaltedError", "SagaRolledBack")
        assert (dashboard.home / "HALT").exists()
        stopped_at = len(moves)
        time.sleep(0.2)
        assert len(moves) == stopped_at
        halts = [r for r in kit.store.records() if r.kind == "control.halt"]
        assert "arm <b>jammed</b>" in str(halts[-1].data["reason"])
        with pytest.raises((HaltedError, SagaRolledBack)), kit.transaction("after halt"):
            step(angle=1)
    finally:
        stop.set()
        thread.join(10)
        page.goto(f"{dashboard.url}/ui/control")
        if "HALTED" in page.locator("#switch-state").inner_text():
            page.get_by_label("Reason").fill("arm fixed")
            page.get_by_label("Yes, let every agent act again").check()
            page.get_by_role("button", name="Resume").click()
        expect(page.locator("#switch-state")).to_contain_text("RUNNING")
        assert not (dashboard.home / "HALT").exists()
        with kit.transaction("after resume"):
            assert step(angle=2) == 2  # free to act again
        kit.close()
