"""The live log: a record another process appends shows on the page within a second (as text),
and the event stream resumes after the last event a client saw (``Last-Event-ID``)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
from agent_saga import AgentKit
from browser_kit import Dashboard, Guard, Snap
from playwright.sync_api import Page, expect

HOSTILE_TOOL = "<img src=x onerror=alert('live')>"


def note(text: str) -> str:
    return text


def append_saga(dashboard: Dashboard, name: str, tool: str = "live.note") -> None:
    """One committed saga in the dashboard's home (``agent-saga ui`` ships it as origin local)."""
    kit = AgentKit(home=dashboard.home)
    try:
        step = kit.tool(name=tool, compensate=lambda text: None)(note)
        with kit.transaction(name):
            step(text=name)
    finally:
        kit.close()


def test_a_record_appended_by_another_process_shows_within_a_second(
    dashboard: Dashboard, guarded: tuple[Page, Guard], snap: Snap
) -> None:
    page, _ = guarded
    dashboard.login(page)
    page.get_by_role("link", name="Live log").click()
    expect(page.locator("#live-state")).to_have_text("following the log")
    append_saga(dashboard, "live-one", tool=HOSTILE_TOOL)
    appended = time.monotonic()  # the saga's records are in the home's log now
    rows = page.locator("#live-log tr", has_text="saga.end")
    expect(rows.first).to_be_visible(timeout=5000)
    elapsed = time.monotonic() - appended
    assert elapsed < 1.0, elapsed  # shipped, stored, streamed and shown within a second
    assert HOSTILE_TOOL in page.locator("#live-log").inner_text()  # shown as text
    kinds = page.locator("#live-log tr td:nth-child(3)").all_inner_texts()
    assert "saga.begin" in kinds
    assert "saga.end" in kinds
    assert page.locator("main img").count() == 0
    snap(page, "live-log")


def events(lines: Iterator[str], count: int) -> list[tuple[str, dict[str, object]]]:
    """The next ``count`` record events of an SSE stream: (id, data)."""
    found: list[tuple[str, dict[str, object]]] = []
    event_id = ""
    for line in lines:
        if line.startswith("id: "):
            event_id = line[4:]
        elif line.startswith("data: "):
            found.append((event_id, json.loads(line[6:])))
            if len(found) == count:
                return found
    raise AssertionError("the stream ended")


def test_the_stream_resumes_after_the_last_event_id(dashboard: Dashboard, page: Page) -> None:
    dashboard.login(page)
    cookie = page.context.cookies()[0]["value"]
    with httpx.Client(base_url=dashboard.url, trust_env=False, timeout=10) as client:
        client.cookies.set("asg_ui", cookie, path="/ui")
        with client.stream("GET", "/ui/live/stream") as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            append_saga(dashboard, "resume-a")
            first = events(stream.iter_lines(), 2)
        last_id = first[-1][0]
        assert first[0][1]["kind"] == "saga.begin"
        append_saga(dashboard, "resume-b")
        with client.stream("GET", "/ui/live/stream", headers={"last-event-id": last_id}) as again:
            rest = events(again.iter_lines(), 1)
        seqs = [int(str(data["seq"])) for _, data in first + rest]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # nothing lost, none twice
    with httpx.Client(base_url=dashboard.url, trust_env=False) as anonymous:
        assert anonymous.get("/ui/live/stream").status_code == 401
