"""Commands another package adds to ``agent-saga`` through the ``agent_saga.commands`` group.

Each test installs a small distribution into a temporary directory on ``sys.path`` (a real
``.dist-info`` with ``entry_points.txt``), the way an installed package declares its command.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_saga.cli import _plugins, main
from click.testing import CliRunner


def _install(site: Path, module: str, source: str, entry: str) -> None:
    (site / f"{module}.py").write_text(source, encoding="utf-8")
    info = site / f"{module}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {module.replace('_', '-')}\nVersion: 1.0\n",
        encoding="utf-8",
    )
    (info / "entry_points.txt").write_text(f"[agent_saga.commands]\n{entry}\n", encoding="utf-8")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    _plugins._entry_points.cache_clear()
    yield site
    _plugins._entry_points.cache_clear()
    for name in [m for m in sys.modules if m.startswith("saga_plugin_")]:
        del sys.modules[name]


def test_a_plugin_command_runs_with_the_global_home(site: Path, tmp_path: Path) -> None:
    _install(
        site,
        "saga_plugin_hello",
        "import click\n"
        "from agent_saga.cli import current_settings\n"
        "@click.command()\n"
        "@click.argument('name')\n"
        "def hello(name):\n"
        "    '''Say hello from a plugin.'''\n"
        "    click.echo(f'hello {name} in {current_settings().home.name}')\n",
        "hello = saga_plugin_hello:hello",
    )
    home = tmp_path / "plugin-home"
    listing = CliRunner().invoke(main, ["--help"])
    assert "hello" in listing.output
    assert "Say hello from a plugin." in listing.output
    result = CliRunner().invoke(main, ["--home", str(home), "hello", "ada"])
    assert result.exit_code == 0, result.output
    assert result.output == "hello ada in plugin-home\n"


def test_a_plugin_cannot_replace_a_built_in_command(site: Path, tmp_path: Path) -> None:
    _install(
        site,
        "saga_plugin_shadow",
        "import click\n@click.command()\ndef verify():\n    click.echo('shadowed')\n",
        "verify = saga_plugin_shadow:verify",
    )
    result = CliRunner().invoke(main, ["--home", str(tmp_path / "none"), "verify"])
    assert "shadowed" not in result.output
    assert result.exit_code == 2  # the built-in verify: no home here


def test_a_broken_plugin_is_one_line_naming_its_package(site: Path, tmp_path: Path) -> None:
    _install(
        site,
        "saga_plugin_broken",
        "raise ImportError('no such thing')\n",
        "broken = saga_plugin_broken:cmd",
    )
    _install(site, "saga_plugin_notcmd", "cmd = 42\n", "notcmd = saga_plugin_notcmd:cmd")
    broken = CliRunner().invoke(main, ["--home", str(tmp_path), "broken"])
    assert broken.exit_code == 1
    assert broken.output.count("\n") == 1
    assert "saga-plugin-broken" in broken.output
    assert "no such thing" in broken.output
    notcmd = CliRunner().invoke(main, ["--home", str(tmp_path), "notcmd"])
    assert notcmd.exit_code == 1
    assert "is not a click command" in notcmd.output
