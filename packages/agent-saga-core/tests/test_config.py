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
        ("segment_records = 0\n", "'segment_records' must be a positive integer"),
        ("segment_bytes = '64M'\n", "'segment_bytes' must be a positive integer"),
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


def test_fleet_schema_and_chain_key_file_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent_saga._config import chain_key_file_setting, configured_chain_key, schema_setting

    (tmp_path / "agent-saga.toml").write_text(
        'store_schema = "fleet_a"\nchain_key_file = "secrets/chain.key"\n'
    )
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "chain.key").write_text("  " + "k" * 32 + "\n")
    (tmp_path / "secrets" / "chain.key").chmod(0o600)
    config = find_config(tmp_path)
    assert schema_setting(config) == "fleet_a"
    assert chain_key_file_setting(config) == tmp_path / "secrets" / "chain.key"
    assert configured_chain_key(config) == b"k" * 32  # whitespace around it is not the key
    other = tmp_path / "other.key"
    other.write_text("o" * 20)
    other.chmod(0o600)
    monkeypatch.setenv("AGENT_SAGA_STORE_SCHEMA", "fleet_b")
    monkeypatch.setenv("AGENT_SAGA_CHAIN_KEY_FILE", str(other))
    assert schema_setting(config) == "fleet_b"
    assert configured_chain_key(config) == b"o" * 20


@pytest.mark.parametrize("name", ["store_schema", "chain_key_file", "server", "server_token_file"])
def test_new_settings_must_be_strings(tmp_path: Path, name: str) -> None:
    (tmp_path / "agent-saga.toml").write_text(f"{name} = 3\n")
    with pytest.raises(ConfigurationError, match=f"'{name}' must be a string"):
        find_config(tmp_path)


def test_a_control_plane_url_needs_an_installed_connector(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``AgentKit(server=...)`` (or ``$AGENT_SAGA_SERVER``) loads the connector for the URL's
    scheme through the ``agent_saga.connectors`` entry points; none for a scheme is one line,
    before anything is opened."""
    from agent_saga import AgentKit

    with pytest.raises(ConfigurationError, match=r"^no connector for ftp:// control planes"):
        AgentKit(home=tmp_path / "a", server="ftp://plane.example/", token="t")
    monkeypatch.setenv("AGENT_SAGA_SERVER", "gopher://plane.example/")
    with pytest.raises(ConfigurationError, match=r"^no connector for gopher://"):
        AgentKit(home=tmp_path / "b")
    assert not (tmp_path / "a").exists()
    assert not (tmp_path / "b").exists()


def test_a_mistyped_control_plane_url_is_named_as_such(tmp_path: Path) -> None:
    """A URL without a scheme, or with a mistyped one, says so, not "install the server
    package" (which may be installed), and does not repeat the URL (it may hold a password)."""
    from importlib.metadata import entry_points

    from agent_saga import AgentKit

    with pytest.raises(ConfigurationError) as caught:
        AgentKit(home=tmp_path / "a", server="127.0.0.1:8000", token="t")
    assert str(caught.value) == "the control plane's URL has no scheme (such as http://)"
    with pytest.raises(ConfigurationError) as caught:
        AgentKit(home=tmp_path / "b", server="htp://ops:hunter2@127.0.0.1:8000", token="t")
    schemes = sorted(point.name for point in entry_points(group="agent_saga.connectors"))
    hint = f"installed: {', '.join(f'{name}://' for name in schemes)}; check the URL"
    assert str(caught.value) == (
        f"no connector for htp:// control planes is installed ({hint})"
        if schemes
        else "no connector for htp:// control planes is installed (pip install agent-saga-server)"
    )
    assert not (tmp_path / "a").exists()
    assert not (tmp_path / "b").exists()


def test_control_plane_settings_and_the_token_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent_saga._config import read_token_file, server_setting, server_token_file_setting

    (tmp_path / "agent-saga.toml").write_text(
        'server = "https://plane.example"\nserver_token_file = "secrets/agent.token"\n'
    )
    (tmp_path / "secrets").mkdir()
    token = tmp_path / "secrets" / "agent.token"
    token.write_text("  asg_token\n")
    token.chmod(0o600)
    config = find_config(tmp_path)
    assert server_setting(config) == "https://plane.example"
    assert server_token_file_setting(config) == token
    assert read_token_file(token) == "asg_token"
    monkeypatch.setenv("AGENT_SAGA_SERVER", "https://other.example")
    monkeypatch.setenv("AGENT_SAGA_SERVER_TOKEN_FILE", str(tmp_path / "env.token"))
    assert server_setting(config) == "https://other.example"
    assert server_token_file_setting(config) == tmp_path / "env.token"
    token.chmod(0o644)
    with pytest.raises(ConfigurationError, match=r"open to other users \(mode 644\)"):
        read_token_file(token)
    with pytest.raises(ConfigurationError, match="cannot read the token file"):
        read_token_file(tmp_path / "env.token")
    (tmp_path / "empty.token").write_text("\n")
    (tmp_path / "empty.token").chmod(0o600)
    with pytest.raises(ConfigurationError, match="holds no token"):
        read_token_file(tmp_path / "empty.token")


def test_segment_limits_from_the_configuration_roll_the_file_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent_saga import AgentKit

    (tmp_path / "agent-saga.toml").write_text("segment_records = 5\n")
    monkeypatch.chdir(tmp_path)
    kit = AgentKit(home=tmp_path / "home")
    try:
        assert kit.store.describe()["segments"] == {
            "open": "log.jsonl",
            "roll_bytes": 64 * 1024 * 1024,
            "roll_records": 5,
        }
    finally:
        kit.close()
