"""The whole suite runs without the shell's settings for agent-saga and the terminal.

A developer's shell may set ``NO_COLOR``, ``FORCE_COLOR``, ``TERM``, ``COLUMNS``,
``AGENT_SAGA_STORE``, ``AGENT_SAGA_HOME`` and more; a test that inherits them tests that shell.
For the whole session (so module-scoped fixtures too, and every subprocess a test starts from
``os.environ``) they are unset with :func:`pytest_agent_saga.clean_environment`, and restored at
the end. A test that wants one sets it itself. ``AGENT_SAGA_TEST_PG_URL`` is kept.

pytest reads this file for every test under this directory: in ``uv run pytest``, and in each
member's own environment too (``uv run --isolated --package <dist> pytest packages/<dir>/tests``
still finds the repository's ``pyproject.toml``, so its rootdir is this directory). The members'
own conftests clear their frameworks' settings (``SLACK_*``, ``OTEL_*``, ...) in addition.

``--inherit-environment`` turns this off, to show what the suite would depend on.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

INHERIT_OPTION = "--inherit-environment"
ENVIRONMENT_MODULE = (
    Path(__file__).parent / "packages/pytest-agent-saga/src/pytest_agent_saga/_environment.py"
)


def load_clean_environment() -> Callable[[pytest.MonkeyPatch], list[str]]:
    """``pytest_agent_saga.clean_environment``, read from its file.

    The core's own environment (``uv run --isolated --package agent-saga``) cannot install
    pytest-agent-saga, which depends on the core, yet pytest reads this file there too. The
    module imports only the standard library.
    """
    spec = importlib.util.spec_from_file_location("_suite_environment", ENVIRONMENT_MODULE)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {ENVIRONMENT_MODULE}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    clean: Callable[[pytest.MonkeyPatch], list[str]] = module.clean_environment
    return clean


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
    clean_environment = load_clean_environment()
    with pytest.MonkeyPatch.context() as monkeypatch:
        clean_environment(monkeypatch)
        yield
