"""A kit against a control plane: ``AgentKit(server=URL, token=...)``.

The core depends on no server package. The connector for a URL's scheme is found through the
``agent_saga.connectors`` entry points (``agent-saga-server`` declares ``http`` and ``https``)
and imported only when a kit is given ``server=`` (or ``$AGENT_SAGA_SERVER`` or ``server`` in
the configuration names one). A connector is a callable ``(url, *, token, home) ->
Connection``; the token it gets is never ``None``. A kit asked to count only passkey votes
(``AgentKit(require_passkey=True)`` or ``require_passkey`` in the configuration) also passes
``require_passkey=True``, and a connection whose ``approvals`` do not then count only passkey
votes is closed and refused.

What a :class:`Connection` gives the kit: the kill switch and the approvals it uses, its gate
rules rebound where the server keeps their state (budgets), a shipper started on the kit's
store (:meth:`Connection.attach`), and what the manifest and ``status()`` say of this mode.
The local log stays the write-ahead log: nothing a connection does may put a network round
trip on a transaction's critical path except what the gate itself asks (approvals, budgets).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from .._config import (
    SERVER_ENV,
    SERVER_TOKEN_FILE_ENV,
    Config,
    find_config,
    read_token_file,
    server_token_file_setting,
)
from .._config import server_setting as configured_server
from .._engine.runtime import StepApprover
from .._errors import ConfigurationError
from .._gate.decisions import Rule
from .._gate.killswitch import KillSwitch
from .._log.store import LogStore

GROUP = "agent_saga.connectors"


class Connection(Protocol):
    """A kit's link to a control plane (see the module docstring)."""

    kill_switch: KillSwitch
    approvals: StepApprover | None

    def rules(self, rules: Sequence[Rule]) -> list[Rule]:
        """The kit's rules, with those whose state the server keeps rebound to it."""
        ...

    def attach(self, store: LogStore, home: Path) -> None:
        """Start shipping ``store``'s records (and the home's checkpoints) in the background."""
        ...

    def drain(self, size: int, timeout: float) -> dict[str, Any]:
        """Wait, at most ``timeout`` seconds, until the server holds the attached log's first
        ``size`` records and a checkpoint covering them (a device's sync, ``kit.sync(server=)``).

        Returns the shipping state then: ``drained`` (bool), ``origin``, ``shipped_seq``,
        ``server_checkpoint_size``, and ``problem`` / ``last_error`` when it is not drained.
        """
        ...

    def health(self) -> list[str]:
        """Problems that make the kit not ready (empty when none)."""
        ...

    def describe(self) -> dict[str, Any]:
        """The manifest's ``server`` section."""
        ...

    def not_claimed(self) -> list[str]:
        """Limits of this mode, for the manifest's ``not_claimed``."""
        ...

    def close(self) -> None:
        """Ship what can be shipped in a short while, then stop (idempotent)."""
        ...


def server_setting(server: str | None, config: Callable[[], Config] = find_config) -> str | None:
    """The control plane's URL: ``server`` if given, else ``$AGENT_SAGA_SERVER``, else
    ``server`` in the configuration."""
    if server:
        return server
    return os.environ.get(SERVER_ENV) or configured_server(config()) or None


def connect(
    server: str, *, token: str | None, home: Path, require_passkey: bool = False
) -> Connection:
    """The connection the installed connector for ``server``'s scheme makes (given
    ``require_passkey=True`` only when it is set, so a connector that predates it still
    serves the kits that do not ask for it).

    The token is ``token``, else the text of the file ``$AGENT_SAGA_SERVER_TOKEN_FILE`` or
    ``server_token_file`` in the configuration names.

    Raises:
        ConfigurationError: no token, a token file that cannot be used, a URL without a
            scheme, no connector for the scheme installed, or one that cannot be loaded, or
            (``require_passkey``) whose approvals would count votes without a passkey; and
            whatever the connector raises for a bad URL or token.
    """
    from importlib.metadata import entry_points  # costs ~30 ms: only a kit given a server pays

    scheme, separator, _ = server.lower().partition("://")
    if not separator:
        raise ConfigurationError("the control plane's URL has no scheme (such as http://)")
    points = {point.name: point for point in entry_points(group=GROUP)}
    point = points.get(scheme)
    if point is None:
        # the URL is not repeated: it may carry a password
        hint = (
            f"installed: {', '.join(f'{name}://' for name in sorted(points))}; check the URL"
            if points
            else "pip install agent-saga-server"
        )
        raise ConfigurationError(
            f"no connector for {scheme}:// control planes is installed ({hint})"
        )
    if token is None:
        path = server_token_file_setting(find_config())
        if path is None:
            raise ConfigurationError(
                f"AgentKit(server=...) needs token=... (or ${SERVER_TOKEN_FILE_ENV} or "
                "server_token_file in agent-saga.toml naming a file that holds it)"
            )
        token = read_token_file(path)
    try:
        factory = point.load()
    except Exception as exc:  # any import-time failure of a third-party package
        raise ConfigurationError(f"the {scheme}:// connector cannot be loaded: {exc}") from exc
    options = {"require_passkey": True} if require_passkey else {}
    connection: Connection = factory(server, token=token, home=home, **options)
    if require_passkey and getattr(connection.approvals, "require_passkey", False) is not True:
        connection.close()
        raise ConfigurationError(
            f"the {scheme}:// connector does not make approvals that require passkeys "
            "(require_passkey=True): upgrade it"
        )
    return connection


__all__ = ["GROUP", "SERVER_ENV", "Connection", "connect", "server_setting"]
