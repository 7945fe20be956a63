"""Helpers of the browser tests (fixtures in ``ui/conftest.py``): the guard that watches a page,
and a running ``agent-saga ui``."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from agent_saga import IRREVERSIBLE, AgentKit, RequireApproval, ToolCall
from playwright.sync_api import ConsoleMessage, Dialog, Page, Request

LOCAL = ("127.0.0.1", "localhost")
AXE_VERSION = "4.14.1"
AXE = Path(__file__).resolve().parent / "ui" / "axe_core" / "axe.min.js"
"""axe-core, vendored (see ``ui/axe_core/README.md``)."""
SERIOUS = ("serious", "critical")
Snap = Callable[[Page, str], Path]
"""The ``snap`` fixture: saves a screenshot of a page under a name."""


def is_local(url: str) -> bool:
    """Whether the browser may fetch ``url``: this machine, or a URL that is no fetch."""
    parts = urlsplit(url)
    if parts.scheme in ("data", "blob", "about"):
        return True
    return parts.scheme in ("http", "https", "ws") and parts.hostname in LOCAL


@dataclass
class Guard:
    """What a page did that a test forbids (see the module docstring)."""

    foreign: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    """Alerts and prompts a page opened (hostile content that ran would open one)."""
    expected: list[str] = field(default_factory=list)
    """Substrings of console errors a test expects (a 401 page logs one)."""

    def on_request(self, request: Request) -> None:
        if not is_local(request.url):
            self.foreign.append(request.url)

    def on_console(self, message: ConsoleMessage) -> None:
        if message.type == "error" and not any(e in message.text for e in self.expected):
            self.errors.append(message.text)

    def on_dialog(self, dialog: Dialog) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def on_page_error(self, error: Exception) -> None:
        self.errors.append(f"uncaught: {error}")


def guard_page(page: Page) -> Guard:
    guard = Guard()
    page.on("request", guard.on_request)
    page.on("console", guard.on_console)
    page.on("pageerror", guard.on_page_error)
    page.on("dialog", guard.on_dialog)
    page.route(lambda url: not is_local(url), lambda route: route.abort())
    return guard


def axe_violations(page: Page) -> list[str]:
    """The serious and critical axe-core violations of the page as it is now, one line each
    (rule, impact, the first offending elements).

    axe-core goes in through the DevTools protocol (``page.evaluate``), which the page's
    Content-Security-Policy does not govern; the page itself still runs under that policy.
    """
    if not page.evaluate("() => typeof window.axe === 'object'"):
        source = AXE.read_text(encoding="utf-8")
        assert source.startswith(f"/*! axe v{AXE_VERSION}"), "the vendored axe-core moved"
        page.evaluate(source)
    found: list[dict[str, Any]] = page.evaluate(
        "async () => (await axe.run(document, {resultTypes: ['violations']})).violations"
    )
    return [
        f"{v['id']} ({v['impact']}): {v['help']} at "
        + "; ".join(" ".join(node["target"]) for node in v["nodes"][:3])
        for v in found
        if v["impact"] in SERIOUS
    ]


@dataclass
class Dashboard:
    """A running ``agent-saga ui``: its base URL, home, the login link it printed, and its
    temporary directory."""

    url: str
    home: Path
    first_link: str
    process: subprocess.Popen[str]
    scratch: Path
    """The server's ``TMPDIR`` (where the playground's sandboxes are made, and removed)."""

    def login_link(self, subject: str = "ann", role: str = "admin") -> str:
        """A fresh one-time login link, minted in the dashboard's database."""
        from agent_saga_server.dashboard import mint_login
        from agent_saga_server.store.db import open_database

        db = open_database(None, self.home)
        try:
            return f"{self.url}/ui/login?token={mint_login(db, subject, role)}"
        finally:
            db.close()

    @property
    def named_url(self) -> str:
        """The base URL by host name (``localhost``), which passkeys need."""
        return self.url.replace("127.0.0.1", "localhost")

    def login_as_approver(self, page: Page, subject: str, base: str | None = None) -> None:
        """Log in as a fleet's approver does: an approver token pasted in the login form
        (agents learn who may approve from the approver tokens that exist)."""
        page.goto(f"{base or self.url}/ui/login")
        page.get_by_label("Token").fill(issue_token(self.home, "approver", subject))
        page.get_by_role("button", name="Log in").click()
        assert urlsplit(page.url).path == "/ui/sagas", page.url

    def login(self, page: Page, subject: str = "ann", role: str = "admin") -> None:
        page.goto(self.login_link(subject, role))
        assert urlsplit(page.url).path == "/ui/sagas", page.url


def issue_token(home: Path, scope: str, subject: str) -> str:
    """A control-plane token issued straight into the dashboard's database."""
    from agent_saga_server.store.db import open_database
    from agent_saga_server.store.tokens import issue

    db = open_database(None, home)
    try:
        text, _ = issue(db, scope, subject)  # type: ignore[arg-type]
        return text
    finally:
        db.close()


def enrolment_code(home: Path, subject: str, ttl: float = 900.0) -> str:
    """A passkey enrolment code for ``subject``, issued straight into the dashboard's database
    (as ``agent-saga cloud-server passkeys enrol`` does)."""
    from agent_saga_server.dashboard.enrolment import issue_code
    from agent_saga_server.store.db import open_database

    db = open_database(None, home)
    try:
        with db.transaction() as tx:
            return issue_code(tx, subject, "test", ttl).code
    finally:
        db.close()


CARD = "4111-0000-7777-9999"
MARKUP = "<img src=x onerror=alert(1)>"


class WiresNeedAPerson:
    name = "wires_need_a_person"

    def evaluate(self, call: ToolCall) -> RequireApproval:
        return RequireApproval(self.name, "a wire leaves the bank for good")


def start_agent(
    dashboard: Dashboard, home: Path, origin: str, *, require_passkey: bool = False
) -> tuple[threading.Thread, dict[str, Any]]:
    """An agent on the dashboard's control plane whose one wire waits for an approval
    (``require_passkey``: its engine counts only passkey votes)."""
    token = issue_token(dashboard.home, "agent", origin)
    kit = AgentKit(
        home=home, server=dashboard.url, token=token, rules=[WiresNeedAPerson()],
        require_passkey=require_passkey,
    )  # fmt: skip
    assert kit.guarantees()["approvals"]["require_passkey"] is require_passkey
    seen: dict[str, Any] = {"wires": 0, "error": None, "kit": kit}

    @kit.tool(name="bank.wire", semantics=IRREVERSIBLE, redact=["card"])
    def wire(to: str, amount: int, card: str) -> str:
        seen["wires"] += 1
        return f"{amount} to {to}"

    def agent() -> None:
        try:
            with kit.transaction("payout"):
                wire(to=MARKUP, amount=9000, card=CARD)
        except Exception as exc:  # a denial ends the saga; the test reads which
            seen["error"] = type(exc).__name__

    thread = threading.Thread(target=agent)
    thread.start()
    return thread, seen


def wait_for_request(page: Page, dashboard: Dashboard, origin: str, base: str | None = None) -> Any:
    section = page.locator(".approval", has=page.locator(".requester", has_text=origin))
    for _ in range(100):
        page.goto(f"{base or dashboard.url}/ui/approvals")
        if section.count():
            return section
        page.wait_for_timeout(150)
    raise AssertionError(f"no request from {origin} reached the queue")
