"""The pytest11 entry point. It imports only pytest at load time.

The plugin is loaded into every pytest run of a project that installs it, so loading it must
cost next to nothing and change nothing: it registers options, a marker and fixtures, and no
fixture is autouse. agent-saga is imported inside the fixtures, when a test asks for one.

Fixtures:

* ``saga_home``: an agent-saga home of the test's own (``AGENT_SAGA_HOME`` points at it for the
  test's duration). The log, the ``HALT`` kill switch and everything else a kit keeps in its
  home (approvals and budgets too, when they exist) are therefore per test; nothing lands in the
  working directory. The shell's other agent-saga and terminal settings (``AGENT_SAGA_STORE``,
  ``NO_COLOR``, ``FORCE_COLOR``, ``TERM``, ``COLUMNS``, ...) are unset for the test too (see
  :func:`pytest_agent_saga.clean_environment`), and all are restored when it ends.
* ``saga_kit``: an :class:`agent_saga.AgentKit` on that home, with a fake clock, sequential saga
  ids and a compensator registry layered over the process-wide one; ``saga_scope`` and
  ``default_kit()`` use it during the test. Its log is the file store, or the in-memory store
  when the test also asks for ``saga_memory_store``.
* ``saga_clock``, ``saga_memory_store``, ``saga_ledger`` (a witness of effects that survives a
  killed child), ``saga_scripted_tool`` (a factory of scripted tools), ``saga_chaos`` (the chaos
  runner, configured by ``@pytest.mark.saga_chaos`` and ``--saga-faults``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from agent_saga import AgentKit, FakeClock, MemoryLogStore

    from ._chaos import ChaosRunner
    from ._ledger import JournalLedger
    from ._scripted import ScriptedTool

FAULTS_HELP = (
    "comma-separated fault kinds the saga_chaos runner exercises "
    "(exception, compensation, kill, duplicate, approval; default: all)"
)
MARKER = (
    "saga_chaos(faults=None, skip=()): configure the saga_chaos runner for this test: the fault "
    "kinds to run (default: --saga-faults, else all) and kinds to leave out"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("agent-saga", "agent-saga transactions")
    group.addoption(
        "--saga-faults", action="store", default=None, metavar="KINDS", help=FAULTS_HELP
    )
    parser.addini("saga_faults", FAULTS_HELP, default="")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER)


@pytest.fixture
def saga_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's agent-saga home; ``AGENT_SAGA_HOME`` points at it during the test, and no
    other agent-saga or terminal setting of the shell reaches the test (all are restored
    afterwards)."""
    from ._environment import clean_environment

    clean_environment(monkeypatch)
    home = tmp_path / "agent-saga-home"
    monkeypatch.setenv("AGENT_SAGA_HOME", str(home))
    return home


@pytest.fixture
def saga_clock() -> FakeClock:
    """A clock that moves only when told to (``advance``); the ``saga_kit`` runs on it."""
    from agent_saga import FakeClock

    return FakeClock()


@pytest.fixture
def saga_memory_store() -> MemoryLogStore:
    """An in-memory log; asking for it makes ``saga_kit`` log there instead of on disk."""
    from agent_saga import MemoryLogStore

    return MemoryLogStore()


@pytest.fixture
def saga_kit(
    request: pytest.FixtureRequest, saga_home: Path, saga_clock: FakeClock
) -> Iterator[AgentKit]:
    """A kit on this test's home; the module-level API (``saga_scope``) routes to it."""
    from agent_saga import AgentKit, SequentialIds, use_kit

    from ._registry import ACTIVE, LayeredRegistry, process_registry

    store: Any = "file"
    if "saga_memory_store" in request.fixturenames:
        store = request.getfixturevalue("saga_memory_store")
    kit = AgentKit(
        home=saga_home,
        store=store,
        clock=saga_clock,
        ids=SequentialIds(),
        registry=LayeredRegistry(process_registry()),
    )
    token = ACTIVE.set(kit)
    try:
        with kit, use_kit(kit):
            yield kit
    finally:
        ACTIVE.reset(token)


@pytest.fixture
def saga_ledger(tmp_path: Path) -> JournalLedger:
    """A witness of effects kept in a journal file, so a killed child's effects are seen."""
    from ._ledger import JournalLedger

    return JournalLedger(tmp_path / "agent-saga-ledger" / "journal")


@pytest.fixture
def saga_scripted_tool(saga_kit: AgentKit) -> Callable[..., ScriptedTool]:
    """A factory: ``saga_scripted_tool("pay.charge", {"id": 1}, TimeoutError(), params=...)``.

    See :class:`pytest_agent_saga.ScriptedTool` for the arguments.
    """
    from ._scripted import ScriptedTool

    def make(name: str, *outcomes: object, **options: Any) -> ScriptedTool:
        return ScriptedTool(saga_kit, name, outcomes, **options)

    return make


def _fault_kinds(request: pytest.FixtureRequest) -> list[str]:
    from ._faults import FAULT_KINDS

    marker = request.node.get_closest_marker("saga_chaos")
    chosen: Any = marker.kwargs.get("faults") if marker else None
    if chosen is None:
        chosen = request.config.getoption("--saga-faults") or request.config.getini("saga_faults")
    if isinstance(chosen, str):
        chosen = [part.strip() for part in chosen.split(",") if part.strip()]
    kinds = list(chosen) if chosen else list(FAULT_KINDS)
    skip = set(marker.kwargs.get("skip", ())) if marker else set()
    return [kind for kind in kinds if kind not in skip]


@pytest.fixture
def saga_chaos(request: pytest.FixtureRequest, saga_kit: AgentKit, tmp_path: Path) -> ChaosRunner:
    """The chaos runner: ``saga_chaos.run(transaction, world=...)`` fails the test on a broken
    invariant. It uses the ``saga_kit``'s compensators, and the ``saga_ledger`` when the test
    asks for it too."""
    from ._chaos import ChaosRunner

    ledger = (
        request.getfixturevalue("saga_ledger") if "saga_ledger" in request.fixturenames else None
    )
    return ChaosRunner(
        tmp_path / "agent-saga-chaos",
        saga_kit.runtime.registry,
        _fault_kinds(request),
        ledger,
        kit=saga_kit,
    )
