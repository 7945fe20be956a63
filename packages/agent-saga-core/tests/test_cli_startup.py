"""The command line imports what the command called needs: built-in commands defined in other
modules are loaded when they run (``LAZY_COMMANDS``), plugins' metadata only when a name is not
built in."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import click
from agent_saga.cli import main
from agent_saga.cli._main import LAZY_COMMANDS, load_lazy_command
from click.testing import CliRunner


def test_every_lazy_name_loads_its_command_and_every_module_command_is_listed() -> None:
    for name in LAZY_COMMANDS:
        assert load_lazy_command(name).name == name
    for module_name in set(LAZY_COMMANDS.values()):
        module = importlib.import_module(module_name, "agent_saga.cli")
        for command in getattr(module, "COMMANDS", ()):
            assert isinstance(command, click.Command)
            assert LAZY_COMMANDS.get(str(command.name)) == module_name, command.name


def test_the_help_lists_the_lazy_commands_with_their_summaries() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0, result.output
    for name in ("verify", "certify", "recover", "approve", "archive", "sync"):
        assert f"  {name} " in result.output


def test_listing_sagas_imports_no_audit_mesh_plugin_or_engine_code(tmp_path: Path) -> None:
    probe = (
        "import sys\n"
        "from agent_saga.cli import main\n"
        "try:\n"
        "    main(['--home', sys.argv[1], 'sagas', '--limit', '5'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = ['agent_saga.proofs._audit', 'agent_saga.proofs._mesh.merge',"
        " 'agent_saga.cli._proofs', 'agent_saga.cli._approvals', 'importlib.metadata',"
        " 'agent_saga._engine.runtime', 'agent_saga._kit.agentkit', 'agent_saga._gate.decisions']\n"
        "print(','.join(m for m in heavy if m in sys.modules), file=sys.stderr)\n"
    )
    home = tmp_path / "home"
    assert CliRunner().invoke(main, ["--home", str(home), "demo"]).exit_code == 0
    result = subprocess.run(
        [sys.executable, "-c", probe, str(home)], capture_output=True, text=True, check=True
    )
    assert "book-trip" in result.stdout  # the demo's saga
    assert result.stderr.strip() == ""


def test_a_misspelled_command_is_offered_the_lazy_ones_too(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["--home", str(tmp_path / "home"), "verfy"])
    assert result.exit_code == 2
    assert "Did you mean one of: 'certify', 'verify'?" in result.output


def test_saga_records_is_listed_before_its_first_use() -> None:
    import agent_saga.cli

    assert "saga_records" in dir(agent_saga.cli)


def test_every_lazily_loaded_group_has_its_subcommands_in_a_fresh_process(tmp_path: Path) -> None:
    """A command group loaded when it runs brings the subcommands other modules attach to it
    (``keys add/list/revoke/new``), in a process that imported nothing else first."""
    probe = (
        "import sys, click\n"
        "from agent_saga.cli._main import load_lazy_command\n"
        "command = load_lazy_command(sys.argv[1])\n"
        "if isinstance(command, click.Group):\n"
        "    print(' '.join(sorted(command.commands)))\n"
    )
    for name in LAZY_COMMANDS:  # each first, alone: no other module attached anything yet
        result = subprocess.run(
            [sys.executable, "-c", probe, name], capture_output=True, text=True, check=True
        )
        if name == "keys":
            assert result.stdout.split() == ["add", "list", "new", "revoke"]
    script = str(Path(sys.executable).parent / "agent-saga")
    new = subprocess.run(
        [script, "--home", str(tmp_path / "h"), "keys", "new", str(tmp_path / "admin.key")],
        check=False,
        capture_output=True,
        text=True,
        env={**os.environ, "AGENT_SAGA_KEY_PASSPHRASE": "x"},
    )
    assert "No such command" not in new.stderr, new.stderr
    assert (tmp_path / "admin.key.pub").exists(), new.stderr
