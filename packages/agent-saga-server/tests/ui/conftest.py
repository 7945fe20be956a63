"""Browser fixtures: Debian's chromium driven by Playwright's sync API (``executable_path`` set:
no browser is downloaded), a real ``agent-saga ui`` process on 127.0.0.1, and a guarded page.

The browser lives for this package's tests only (``scope="package"``): Playwright's sync API
runs an event loop in the test's thread through greenlets, and while it lives, other tests of
the same worker break (``asyncio.run`` refuses to start, ``ast`` miscounts its recursion).
pytest tears a package-scoped fixture down before the worker's next test from elsewhere, so
the loop never outlives these tests; pytest-playwright's session-wide fixtures are not used.

Every page a test gets through ``guarded`` fails the test, at teardown, if the browser sent a
request to any host but 127.0.0.1 or localhost (such a request is also aborted), if the page
logged a console error or threw (a Content-Security-Policy violation is one), or if it opened
a dialog (the ``alert`` hostile content would run).

Without chromium the browser tests are skipped, except under CI (``CI`` set), where they fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from browser_kit import Dashboard, Guard, axe_violations, guard_page
from plane_testkit import AGENT_SAGA, server_environment
from plane_testkit import _stop as stop_server
from playwright.sync_api import Browser, Page, sync_playwright

CHROMIUM = os.environ.get("AGENT_SAGA_TEST_CHROMIUM", "/usr/bin/chromium")
ARTEFACTS = os.environ.get("AGENT_SAGA_TEST_ARTEFACTS")
"""Read at import: each test runs in a cleaned environment (``conftest._isolated``)."""


@pytest.fixture(scope="session")
def chromium_executable() -> str:
    found = shutil.which(CHROMIUM)
    if found is None:
        message = f"chromium is not installed at {CHROMIUM} (apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


@pytest.fixture(scope="package")
def browser(chromium_executable: str) -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium_executable, headless=True)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh context (cookies, storage) and page per test."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    yield context.new_page()
    context.close()


@pytest.fixture
def guarded(page: Page) -> Iterator[tuple[Page, Guard]]:
    """A page, guarded (see the module docstring)."""
    guard = guard_page(page)
    yield page, guard
    assert guard.foreign == [], f"requests left 127.0.0.1: {guard.foreign}"
    assert guard.errors == [], f"console errors: {guard.errors}"
    assert guard.dialogs == [], f"dialogs opened: {guard.dialogs}"


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where page screenshots go: ``$AGENT_SAGA_TEST_ARTEFACTS/ui`` when that is set (a test
    artefacts folder, never committed), else the session's temporary directory."""
    if ARTEFACTS:
        folder = Path(ARTEFACTS) / "ui"
        folder.mkdir(parents=True, exist_ok=True)
        return folder
    return tmp_path_factory.mktemp("screenshots")


@pytest.fixture
def snap(screenshots: Path) -> Callable[[Page, str], Path]:
    """Save a screenshot of a page under :func:`screenshots`, as ``NAME.png``, and check the
    page with axe-core (no serious or critical violation)."""

    def take(page: Page, name: str) -> Path:
        path = screenshots / f"{name}.png"
        page.screenshot(path=path, full_page=True)
        assert path.stat().st_size > 1000
        assert axe_violations(page) == [], f"accessibility of the {name} page"
        return path

    return take


@pytest.fixture(scope="session")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    """``agent-saga --home HOME ui --port 0``, read until it prints its login link; its
    temporary files (``TMPDIR``) go to a directory of the test session."""
    home = tmp_path_factory.mktemp("ui-home")
    scratch = tmp_path_factory.mktemp("ui-tmp")  # the server's temporary files (playground)
    errors = (home / "ui.err").open("w")
    env = {**server_environment(), "TMPDIR": str(scratch)}
    process = subprocess.Popen(
        [AGENT_SAGA, "--home", str(home), "ui", "--port", "0"],
        stdout=subprocess.PIPE, stderr=errors, text=True, env=env, cwd=home,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        first, second = process.stdout.readline(), process.stdout.readline()
        if not first.startswith("agent-saga dashboard on "):
            process.wait(30)
            raise RuntimeError(f"ui did not start: {first!r} {(home / 'ui.err').read_text()}")
        url = first.split()[3].removesuffix("/ui/")
        yield Dashboard(url, home, second.split()[-1], process, scratch)
    finally:
        stop_server(process)
        errors.close()
