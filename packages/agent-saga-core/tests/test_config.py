"""Project configuration files and the order in which settings win."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_saga import ConfigurationError
from agent_saga._config import find_config, resolve_home, store_setting


def test_pyproject_section(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.agent-saga]\nhome = "var/saga"\nimports = ["shop.tools"]\nstore = "file"\n'
    )
    nested = tmp_path / "src" / "pkg"
    nested.mkdir(parents=True)
    config = find_config(nested)
    assert config.home == tmp_path / "var/saga"
    assert config.imports == ("shop.tools",)
    assert config.source == tmp_path / "pyproject.toml"


def test_own_file_wins_over_pyproject(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.agent-saga]\nimports = ["a"]\n')
    (tmp_path / "agent-saga.toml").write_text('imports = ["b"]\n')
    assert find_config(tmp_path).imports == ("b",)


def test_pyproject_without_section_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    assert find_config(tmp_path).source is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("imports = 'shop'\n", "must be a list"),
        ("home = 3\n", "'home' must be a string"),
        ("colour = 'blue'\n", "unknown agent-saga setting"),
        ("imports = [\n", "cannot read configuration"),
    ],
)
def test_bad_configuration_is_a_clear_error(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "agent-saga.toml").write_text(text)
    with pytest.raises(ConfigurationError, match=message):
        find_config(tmp_path)


def test_environment_wins_over_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "agent-saga.toml").write_text('home = "from-file"\nstore = "file"\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AGENT_SAGA_HOME", str(tmp_path / "from-env"))
    assert resolve_home() == tmp_path / "from-env"
    monkeypatch.delenv("AGENT_SAGA_HOME")
    assert resolve_home() == tmp_path / "from-file"
    monkeypatch.setenv("AGENT_SAGA_STORE", "postgresql://h/db")
    assert store_setting(find_config()) == "postgresql://h/db"
