"""Shared fixtures: an own agent-saga home and an own default kit per test, and a kit on it.

The shell's agent-saga and terminal settings (``AGENT_SAGA_STORE``, ``NO_COLOR``, ...) are
cleared for the whole session by the repository's ``conftest.py`` (the list is
:mod:`agent_saga.testing.environment`'s); pytest reads that file for these tests in every run,
this package's own environment included.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_saga import AgentKit, SequentialIds
from agent_saga._kit import defaults


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own agent-saga home; nothing lands in the working directory."""
    home = tmp_path / "home"
    monkeypatch.setenv("AGENT_SAGA_HOME", str(home))
    for name in ("AGENT_SAGA_CHAIN_KEY_FILE", "AGENT_SAGA_STORE_SCHEMA"):
        monkeypatch.delenv(name, raising=False)  # a key or schema from the shell stays out
    return home


@pytest.fixture(autouse=True)
def _own_default_kit(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process-wide default kit behind ``saga_scope`` is made afresh in each test (on that
    test's home) and closed after it, so no test sees another's."""
    kits: dict[str, AgentKit] = {}
    monkeypatch.setattr(defaults._Defaults, "kits", kits)
    yield
    for made in kits.values():
        made.close()


@pytest.fixture
def home(_isolated_home: Path) -> Path:
    return _isolated_home


@pytest.fixture
def kit(home: Path) -> Iterator[AgentKit]:
    with AgentKit(home=home, ids=SequentialIds()) as k:
        yield k


@pytest.fixture
def admin_key(tmp_path: Path) -> Iterator[Path]:
    """An administrator's private key file, outside the home, trusted for the test's duration
    (as ``admin_keys`` in agent-saga.toml would make it)."""
    from agent_saga._log.admins import trusting_admins
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    path = tmp_path / "admin.key"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    with trusting_admins([key.public_key().public_bytes_raw()]):
        yield path
