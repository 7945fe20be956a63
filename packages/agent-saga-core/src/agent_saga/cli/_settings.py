"""What every command gets from the global options, and how a command reaches it.

``agent-saga --home PATH --chain-key-file PATH --no-color <command>`` resolves the home and the
consoles once, in the group; every command (built in or added by another package through the
``agent_saga.commands`` entry-point group) reads them with :func:`current_settings` or
:data:`pass_settings`, and opens the log with :meth:`Settings.open_kit` so that a keyed chain
and the configured store are honoured everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console

from .._config import (
    CHAIN_KEY_FILE_ENV,
    chain_key_file_setting,
    find_config,
    read_chain_key,
    schema_setting,
    store_setting,
)

if TYPE_CHECKING:
    from .._kit.agentkit import AgentKit

KEY_SOURCES = f"--chain-key-file, ${CHAIN_KEY_FILE_ENV} or chain_key_file in agent-saga.toml"
"""Where a command looks for the chain key, for messages."""


@dataclass(frozen=True)
class Settings:
    """The global options, resolved: the home (and whether it was given), two consoles, and the
    chain key file given with ``--chain-key-file`` (else the environment's or configuration's).
    """

    home: Path
    home_given: bool
    console: Console
    err: Console
    chain_key_file: Path | None = None

    def key_file(self) -> Path | None:
        """The chain key's file: ``--chain-key-file``, ``$AGENT_SAGA_CHAIN_KEY_FILE``, or
        ``chain_key_file`` in the configuration; ``None`` when none is named."""
        return self.chain_key_file or chain_key_file_setting(find_config())

    def chain_key(self) -> bytes | None:
        """The chain key read from :meth:`key_file` (``None``: the chain is not keyed).

        Raises:
            ConfigurationError: the file cannot be read or holds no usable key.
        """
        path = self.key_file()
        return None if path is None else read_chain_key(path)

    def store(self) -> str | None:
        """The configured store (``$AGENT_SAGA_STORE``, else ``store``); ``None``: the file."""
        return store_setting(find_config())

    def store_schema(self) -> str | None:
        """The fleet's PostgreSQL schema, when one is configured."""
        return schema_setting(find_config())

    def open_kit(self, **options: Any) -> AgentKit:
        """An :class:`~agent_saga.AgentKit` on the home and configured store, with the chain key.

        ``options`` go to the kit (``checkpoints=False``, ``rules=...``).
        """
        from .._kit.agentkit import AgentKit

        return AgentKit(home=self.home, chain_key=self.chain_key(), **options)


pass_settings = click.make_pass_decorator(Settings)
"""Decorator handing a command the :class:`Settings` of the ``agent-saga`` group it runs under."""


def current_settings() -> Settings:
    """The :class:`Settings` of the running ``agent-saga`` invocation.

    Raises:
        RuntimeError: when called outside a command run under the ``agent-saga`` group.
    """
    obj = click.get_current_context().find_root().obj
    if not isinstance(obj, Settings):
        raise RuntimeError("not running under the agent-saga command group")
    return obj
