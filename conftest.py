"""The whole suite runs without the shell's settings for agent-saga and the terminal.

A developer's shell may set ``NO_COLOR``, ``FORCE_COLOR``, ``TERM``, ``COLUMNS``,
``AGENT_SAGA_STORE``, ``AGENT_SAGA_HOME`` and more; a test that inherits them tests that shell.
For the whole session (so module-scoped fixtures too, and every subprocess a test starts from
``os.environ``) they are unset (the list is :mod:`agent_saga.testing.environment`'s), and restored
at the end. A test that wants one sets it itself. ``AGENT_SAGA_TEST_PG_URL`` and
``AGENT_SAGA_TEST_PHOENIX`` are kept.

pytest reads this file for every test under this directory: in ``uv run pytest``, and in each
member's own environment too (``uv run --isolated --package <dist> pytest packages/<dir>/tests``
still finds the repository's ``pyproject.toml``, so its rootdir is this directory). The members'
own conftests clear their frameworks' settings (``SLACK_*``, ``OTEL_*``, ...) in addition.

``--inherit-environment`` turns this off, to show what the suite would depend on.

Hypothesis keeps its example database and caches in the session's temporary directory, never
in the directory the run started in (tests write only below their temporary directories), and
runs without its deadline and "too slow" health check (timing is not what a property asserts).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest
from agent_saga.testing.environment import variables_to_clear

INHERIT_OPTION = "--inherit-environment"
_HYPOTHESIS_HOME = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    # Before collection: Hypothesis reads its storage directory on first use, which may come
    # before any fixture runs. A member's own environment may not have Hypothesis at all.
    try:
        from hypothesis import HealthCheck, settings
        from hypothesis.configuration import set_hypothesis_home_dir
    except ImportError:
        return
    home = tempfile.mkdtemp(prefix="agent-saga-hypothesis-")
    config.stash[_HYPOTHESIS_HOME] = home
    set_hypothesis_home_dir(home)
    # Timing is not what a property test asserts: on two busy cores a draw can stall for a
    # second, which Hypothesis's deadline and "too slow" health check would report as a failure.
    settings.register_profile(
        "agent-saga", deadline=None, suppress_health_check=[HealthCheck.too_slow]
    )
    settings.load_profile("agent-saga")


def pytest_unconfigure(config: pytest.Config) -> None:
    home = config.stash.get(_HYPOTHESIS_HOME, None)
    if home is not None:
        from hypothesis.configuration import set_hypothesis_home_dir

        set_hypothesis_home_dir(None)
        shutil.rmtree(home, ignore_errors=True)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        INHERIT_OPTION,
        action="store_true",
        help="let the shell's agent-saga and terminal settings reach the tests (by default the "
        "repository's conftest.py unsets them for the session)",
    )


@pytest.fixture(scope="session", autouse=True)
def _suite_environment(request: pytest.FixtureRequest) -> Iterator[None]:
    if request.config.getoption(INHERIT_OPTION):
        yield
        return
    with pytest.MonkeyPatch.context() as monkeypatch:
        for name in variables_to_clear(os.environ):
            monkeypatch.delenv(name)
        yield
