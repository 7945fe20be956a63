"""Registering a gateway configuration's compensations and probes process-wide, for a process
that did not run the gateway (``agent-saga recover``); see :mod:`agent_saga_mcp.recovery`."""

from __future__ import annotations

from agent_saga import ToolCallGuard, compensator

from ._compensate import compensator_for, probe_for
from ._config import GatewayConfig
from ._upstream import OnDemandUpstreams

_registered: dict[str, tuple[str, str]] = {}
"""Each registered name: the configuration file and declaration it came from."""


def register_compensations(config: GatewayConfig) -> list[str]:
    """Register ``config``'s compensations and probes process-wide; returns the names.

    Raises:
        ConfigError: another configuration already registered the same name differently.
    """
    upstreams = OnDemandUpstreams(config)
    names: list[str] = []
    for decl in config.declarations():
        name = config.compensator_name(decl.upstream, decl.tool) if decl.compensate else None
        for key in filter(None, (name, f"probe:{decl.exposed}" if decl.probe else None)):
            origin = (str(config.path), repr((decl.compensate, decl.probe)))
            if _registered.setdefault(key, origin) != origin:
                raise config.error(
                    decl.where,
                    f"{key} is also declared differently in {_registered[key][0]}; "
                    "give one gateway another [gateway] name",
                )
        if decl.compensate is not None and name is not None:
            compensator(name, compensator_for(decl, decl.compensate, upstreams))
            names.append(name)
        if decl.probe is not None:
            # A guard registers its probe under the tool's name, where recovery looks for it.
            ToolCallGuard(
                decl.exposed,
                semantics=decl.semantics,
                compensate=name,
                probe=probe_for(decl, decl.probe, upstreams),
            )
    return names


__all__ = ["register_compensations"]
