"""An AgentKit's link to a control plane: what ``AgentKit(server=URL, token=...)`` gets.

:func:`connect` is the ``agent_saga.connectors`` entry point for ``http`` and ``https``. It
checks the token (``GET /v1/whoami``: a token the server refuses, or one that is not an agent
token, is a one-line :class:`agent_saga.ConfigurationError`), starts the kill switch's stream
and waits up to ``first_state`` seconds for its first state; a server that cannot be reached
does not stop the kit from starting, it makes it refuse effects (its kill switch is unknown)
and not ready until the server answers.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from agent_saga import Budget, BudgetStore, ConfigurationError, LogStore, Rule

from .approvals import ServerApprovals
from .budgets import ServerBudgetStore
from .http import ServerClient, ServerRefused, ServerUnreachable
from .killswitch import ServerKillSwitch
from .shipper import Shipper


class ServerConnection:
    """The kill switch, approvals, budgets and shipper of one kit against one server."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        stale_after: float = 1.0,
        first_state: float = 2.0,
        ship_interval: float = 0.2,
        require_passkey: bool = False,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ConfigurationError(f"server must be an http:// or https:// URL, got {url!r}")
        self.url = url.rstrip("/")
        self.client = ServerClient(self.url, token)
        self.origin: str | None = None
        try:
            me = self.client.get("/v1/whoami")
        except ServerRefused as exc:
            self.client.close()
            raise ConfigurationError(
                f"the control plane {self.url} refused the token: {exc}"
            ) from None
        except ServerUnreachable:
            me = None  # fail closed at run time: the kill switch reads as unknown
        if me is not None:
            if me["scope"] != "agent":
                self.client.close()
                raise ConfigurationError(
                    f"AgentKit(server=...) needs an agent token, this one is {me['scope']}"
                )
            self.origin = str(me["origin"])
        self.kill_switch = ServerKillSwitch(
            ServerClient(self.url, token, timeout=5.0), stale_after=stale_after
        )
        self.kill_switch.wait_first(first_state)
        self.approvals = ServerApprovals(
            ServerClient(self.url, token, timeout=30.0), require_passkey=require_passkey
        )
        self.budgets = ServerBudgetStore(ServerClient(self.url, token))
        self._token = token
        self._interval = ship_interval
        self.shipper: Shipper | None = None

    def rules(self, rules: Sequence[Rule]) -> list[Rule]:
        """The rules, each :class:`agent_saga.Budget` copied onto the server's accounts."""
        out: list[Rule] = []
        for rule in rules:
            if isinstance(rule, Budget):
                shared = copy.copy(rule)
                shared.store = cast(BudgetStore, self.budgets)
                out.append(shared)
            else:
                out.append(rule)
        return out

    def attach(self, store: LogStore, home: Path) -> None:
        """Start shipping ``store``'s records and ``home``'s checkpoints.

        Raises:
            ConfigurationError: a keyed chain (the server checks hashes without a key).
        """
        if store.describe().get("keyed_chain"):
            self.close()
            raise ConfigurationError(
                "a keyed chain (chain_key) cannot be shipped to a control plane: "
                "the server checks each record's hash without the key"
            )
        self.approvals.channel.store = store
        client = ServerClient(self.url, self._token)
        self.shipper = Shipper(client, self.origin, store, home, interval=self._interval)

    def drain(self, size: int, timeout: float) -> dict[str, Any]:
        """Wait (at most ``timeout`` seconds) until the server holds the attached log's first
        ``size`` records and a checkpoint covering them; the shipping state then, whose
        ``drained`` says whether it does (else ``problem`` or ``last_error`` say why).

        Raises:
            ConfigurationError: no log is attached to this connection.
        """
        if self.shipper is None:
            raise ConfigurationError("no log is attached to this connection")
        return {"url": self.url, **self.shipper.drain(size, timeout)}

    def health(self) -> list[str]:
        problems = []
        if self.shipper is not None:
            if self.shipper.problem is not None:
                problems.append(f"shipping to {self.url} stopped: {self.shipper.problem}")
            if self.shipper.checkpoint_problem is not None:
                problems.append(f"control plane {self.url}: {self.shipper.checkpoint_problem}")
        return problems

    def describe(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "origin": self.origin,
            "log": "the local durable log is the write-ahead log; records are shipped to the "
            "server in the background, in batches, resuming where the server's copy ends",
            "kill_switch": self.kill_switch.describe(),
            "approvals": "requests posted to the server; its approvers' votes come back into "
            "the local log, where the core counts them",
            "budgets": "every Budget of the kit reserves on the server's shared accounts",
            "shipping": None if self.shipper is None else self.shipper.describe(),
        }

    def not_claimed(self) -> list[str]:
        return [
            "records reach the control plane after the fact, in the background: its copy lags "
            "the local log by the shipping backlog (server.shipping in this manifest)",
            f"a halt reaches this agent through the server's push; an agent that hears nothing "
            f"for {self.kill_switch.stale_after:g} s refuses effects, so a halt it cannot hear "
            f"stops it within that time",
            "a value masked with redact_path after its record was shipped stays on the server",
            "approval votes are counted by both the server and this agent, each on its own "
            "clock: expiry is exact only with synchronized clocks",
        ]

    def close(self) -> None:
        if self.shipper is not None:
            self.shipper.close()
        self.kill_switch.close()
        self.approvals.channel.closed.set()
        for client in (self.client, self.approvals.client, self.budgets.client):
            client.close()


def connect(
    url: str, *, token: str | None, home: Path, require_passkey: bool = False
) -> ServerConnection:
    """The ``agent_saga.connectors`` entry point (see the module docstring). The core resolves
    the token (``token=``, ``$AGENT_SAGA_SERVER_TOKEN_FILE`` or ``server_token_file``) and
    ``require_passkey`` (``AgentKit(require_passkey=True)`` or ``require_passkey = true`` in
    the configuration): the kit's approvals then count only passkey votes, each checked again
    by the engine against the arguments about to run.

    Raises:
        ConfigurationError: no token, a token the server refuses, or a non-agent token.
    """
    if not token:
        raise ConfigurationError("AgentKit(server=...) needs an agent token")
    return ServerConnection(url, token, require_passkey=require_passkey)


__all__ = ["ServerConnection", "connect"]
