from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_saga import AgentKit, SequentialIds


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own agent-saga home; nothing lands in the working directory."""
    home = tmp_path / "home"
    monkeypatch.setenv("AGENT_SAGA_HOME", str(home))
    return home


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
