"""The tools the gateway exposes, checked against what the upstreams actually offer.

Once every upstream has listed its tools, each declaration is checked against them: the tool,
its compensation and probe tools exist on that upstream; every mapped argument is a field of
the tool it is sent to, every field it is read from exists in the original call's input schema
(or output schema, when the upstream declares one); every required argument of a compensation
is given; rule, redaction and idempotency-key paths name input fields; hidden tools exist; no
two exposed names collide. A failure is a :class:`~agent_saga_mcp.ConfigError` at the line of
the declaration.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mcp import types

from ._config import CallDecl, ConfigError, GatewayConfig, ProbeDecl, ToolDecl, UpstreamDecl
from ._mapping import Source, required_fields, schema_property


@dataclass(frozen=True)
class Route:
    """One tool as the client sees it, and the upstream tool behind it."""

    exposed: str
    upstream: str
    tool: str
    definition: types.Tool
    decl: ToolDecl | None

    @property
    def parameters(self) -> list[str]:
        properties = self.definition.input_schema.get("properties")
        return [str(name) for name in properties] if isinstance(properties, Mapping) else []


def build_routes(
    config: GatewayConfig,
    catalogs: Mapping[str, Sequence[types.Tool]],
    reserved: Iterable[str] = (),
) -> dict[str, Route]:
    """The exposed tools, by name, after checking every declaration against ``catalogs``.

    Raises:
        ConfigError: a declaration names a tool or a field that does not exist, a compensation
            misses a required argument, or two exposed names collide.
    """
    taken = dict.fromkeys(reserved, "the gateway's own saga tools")
    routes: dict[str, Route] = {}
    for upstream in config.upstreams.values():
        tools = {tool.name: tool for tool in catalogs.get(upstream.name, ())}
        _check_upstream(config, upstream, tools)
        for name, tool in tools.items():
            if name in upstream.hide:
                continue
            exposed = upstream.exposed(name)
            if exposed in taken:
                raise config.error(
                    upstream.where,
                    f"upstreams.{upstream.name}: tool '{exposed}' is also offered by "
                    f"{taken[exposed]}; set a 'prefix' for one of them",
                )
            taken[exposed] = f"upstream '{upstream.name}'"
            definition = tool if exposed == name else tool.model_copy(update={"name": exposed})
            routes[exposed] = Route(
                exposed, upstream.name, name, definition, upstream.tools.get(name)
            )
    return routes


def _check_upstream(
    config: GatewayConfig, upstream: UpstreamDecl, tools: Mapping[str, types.Tool]
) -> None:
    offered = ", ".join(sorted(tools)) or "none"
    for hidden in upstream.hide:
        if hidden not in tools:
            raise config.error(
                (*upstream.where, "hide"),
                f"upstreams.{upstream.name}.hide: no tool '{hidden}' on this upstream "
                f"(it offers: {offered})",
                hidden,
            )
    for decl in upstream.tools.values():
        tool = tools.get(decl.tool)
        if tool is None:
            raise _error(config, decl, decl.where, f"no such tool on this upstream ({offered})")
        _check_tool(config, decl, tool, tools)


def _error(config: GatewayConfig, decl: ToolDecl, where: Any, message: str) -> ConfigError:
    return config.error(where, f"upstreams.{decl.upstream}.tools.{decl.tool}: {message}")


def _check_tool(
    config: GatewayConfig, decl: ToolDecl, tool: types.Tool, tools: Mapping[str, types.Tool]
) -> None:
    inputs = tool.input_schema
    for index, rule in enumerate(decl.rules):
        path = rule.reads
        problem = schema_property(inputs, tuple(path.split("."))) if path else None
        if problem is not None:
            raise _error(config, decl, (*decl.where, "rules", index), f"{rule.kind}: {problem}")
    for path in decl.redact:
        checked = tuple(path.split("."))
        checked = checked[: checked.index("*")] if "*" in checked else checked
        problem = schema_property(inputs, checked)
        if problem is not None:
            raise _error(config, decl, (*decl.where, "redact"), f"redact {path!r}: {problem}")
    if decl.idempotency_key is not None:
        problem = schema_property(inputs, (decl.idempotency_key,))
        if problem is not None:
            where = (*decl.where, "idempotency_key")
            raise _error(config, decl, where, f"idempotency_key: {problem}")
    for call, key in ((decl.compensate, "compensate"), (decl.probe, "probe")):
        if call is not None:
            _check_call(config, decl, tool, call, key, tools)


def _check_call(
    config: GatewayConfig,
    decl: ToolDecl,
    tool: types.Tool,
    call: CallDecl,
    key: str,
    tools: Mapping[str, types.Tool],
) -> None:
    target = tools.get(call.tool)
    if target is None:
        offered = ", ".join(sorted(tools))
        where = (*call.where, "tool")
        raise _error(
            config, decl, where, f"{key}: no tool '{call.tool}' on this upstream ({offered})"
        )
    for name in sorted(call.arguments.names()):
        problem = schema_property(target.input_schema, (name,))
        if problem is not None:
            where = (*call.where, "arguments", name)
            raise _error(config, decl, where, f"{key} ({call.tool}): {problem}")
    missing = sorted(required_fields(target.input_schema) - call.arguments.names())
    if missing:
        raise _error(
            config,
            decl,
            call.where,
            f"{key}: {call.tool} requires {', '.join(missing)}; map or set each "
            "(arguments = {...} or constants = {...})",
        )
    for name, source in call.arguments.sources.items():
        problem = _source_problem(source, tool, decl)
        if problem is not None:
            raise _error(config, decl, (*call.where, "arguments", name), f"{key}: {problem}")
    if isinstance(call, ProbeDecl):
        for name, read in (("landed", call.landed), ("result", call.result)):
            problem = _result_problem(read, target) if read is not None else None
            if problem is not None:
                raise _error(config, decl, (*call.where, name), f"probe {name}: {problem}")


def _source_problem(source: Source, tool: types.Tool, decl: ToolDecl) -> str | None:
    if source.root == "args":
        for path in decl.redact:
            redacted = tuple(path.split("."))
            if _overlaps(source.path, redacted):
                return f"{source} is redacted ({path!r}): never stored, recovery could not use it"
        problem = schema_property(tool.input_schema, source.path)
        return f"{source}: {problem}" if problem else None
    if source.root == "result":
        return _result_problem(source, tool)
    return None


def _result_problem(source: Source, tool: types.Tool) -> str | None:
    """A result path is checked only against a declared output schema (else it is read from the
    result's JSON at run time)."""
    if tool.output_schema is None or not source.path:
        return None
    problem = schema_property(tool.output_schema, source.path)
    return f"{source}: {problem} in the output schema of {tool.name}" if problem else None


def _overlaps(read: tuple[str, ...], redacted: tuple[str, ...]) -> bool:
    """Whether reading ``read`` reads a value that ``redacted`` masks (or part of one)."""
    return all(a == b or "*" in (a, b) for a, b in zip(read, redacted, strict=False))


__all__ = ["Route", "build_routes"]
