"""Assembling a gateway: upstream sessions, checked routes, the kit with its gate and approvals.

Order matters: the upstreams must answer ``tools/list`` before the declarations can be checked
against their tools, and the gate's rules (which include each tool's input schema) exist only
then. A failure at any point stops the upstreams already started.
"""

from __future__ import annotations

from pathlib import Path

import anyio
from agent_saga import AgentKit, Approvals, CompensatorRegistry, Rule
from anyio.abc import TaskGroup

from ._catalog import Route, build_routes
from ._config import GatewayConfig
from ._elicit import ElicitationChannel
from ._gateway import Gateway, guards_for
from ._rules import InputSchemaRule
from ._saga_tools import NAMES
from ._upstream import LiveUpstreams


def gate_rules(config: GatewayConfig, routes: dict[str, Route], home: Path | None) -> list[Rule]:
    """The gateway's gate: every exposed tool's input schema, then the declared rules.

    Raises:
        ConfigError: a declared rule the core refuses to build.
    """
    schemas = {name: route.definition.input_schema for name, route in routes.items()}
    optional = {
        name: {route.decl.idempotency_key}
        for name, route in routes.items()
        if route.decl is not None and route.decl.idempotency_key is not None
    }
    rules: list[Rule] = [InputSchemaRule(schemas, optional)]
    for decl in config.declarations():
        for rule in decl.rules:
            try:
                rules.append(rule.build(decl.exposed, home))
            except Exception as exc:
                raise config.error(rule.where, f"{rule.kind}: {exc}") from None
    return rules


def approvals_for(config: GatewayConfig) -> tuple[Approvals | None, ElicitationChannel | None]:
    """How IRREVERSIBLE calls get a human: elicitation and/or the configured approvers.

    ``(None, None)`` when neither is configured: the kit then takes approvers from the project
    configuration (``agent-saga.toml``), and without any, such calls are refused.
    """
    decl = config.approvals
    if not decl.all_approvers:
        return None, None
    channel = ElicitationChannel(None, decl.elicitation_approver) if decl.elicitation else None
    approvals = Approvals(
        approvers=decl.all_approvers,
        expires_after=decl.expires_after,
        channels=[channel] if channel is not None else [],
    )
    return approvals, channel


async def open_gateway(config: GatewayConfig, home: Path | None, group: TaskGroup) -> Gateway:
    """Start the upstreams in ``group``, check the configuration against them, open the kit.

    The caller owns the result: end its sessions, close ``gateway.upstreams`` and close
    ``gateway.kit`` when done.

    Raises:
        UpstreamError: an upstream could not be started or listed.
        ConfigError: a declaration does not fit the upstreams' tools.
    """
    upstreams = LiveUpstreams(config)
    await upstreams.start(group)
    kit: AgentKit | None = None
    try:
        reserved = NAMES if config.saga_tools else frozenset()
        routes = build_routes(config, upstreams.catalogs, reserved)
        registry = CompensatorRegistry()
        approvals, channel = approvals_for(config)
        rules = gate_rules(config, routes, home)
        kit = AgentKit(home=home, rules=rules, approvals=approvals, registry=registry)
        if channel is not None:
            channel.store = kit.store
        guards = guards_for(config, routes, upstreams, registry)
        return Gateway(config, kit, routes, guards, upstreams)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await upstreams.aclose()
        if kit is not None:
            kit.close()
        raise


__all__ = ["approvals_for", "gate_rules", "open_gateway"]
