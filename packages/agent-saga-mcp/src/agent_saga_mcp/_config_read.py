"""Reading a gateway configuration file into :class:`~agent_saga_mcp.GatewayConfig`.

The layout::

    [gateway]                      # optional
    name = "agent-saga-mcp"        # server name shown to clients; namespaces the compensators
    saga_name = "mcp session"      # name of each session's saga in the log
    saga_tools = true              # expose saga_begin / saga_commit / saga_rollback / saga_status

    [approvals]                    # optional
    approvers = ["unix:alice"]     # may approve from the command line (agent-saga approve)
    elicitation = true             # ask the client's user, when the client supports it
    elicitation_approver = "mcp:client"
    expires_after = 600

    [upstreams.<name>]             # one per upstream server: command (stdio) or url
    command = "..."  args = [...]  env = {...}  pass_env = [...]  cwd = "..."
    url = "http://..."  headers_env = { Authorization = "ENV_VAR" }
    prefix = ""                    # prepended to each tool's name
    hide = ["tool", ...]           # never listed, never callable by the client

    [upstreams.<name>.tools.<tool>]
    semantics = "reversible" | "compensable" | "irreversible"
    compensate = { tool = "...", arguments = { x = "args.x" }, constants = { ... } }
    probe = { tool = "...", arguments = {...}, landed = "result.found", result = "result.x" }
    redact = ["card.cvv"]
    idempotency_key = "<argument the gateway fills with the step's key>"
    [[upstreams.<name>.tools.<tool>.rules]]
    rule = "range" | "max_value" | "allow_values" | "deny_values" | "rate_limit"
         | "require_approval" | "budget"
"""

from __future__ import annotations

import difflib
import math
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

from agent_saga import CompensatorRegistry, ConfigurationError, ToolCallGuard

from ._config import (
    ApprovalsDecl,
    CallDecl,
    ConfigError,
    GatewayConfig,
    KeyPath,
    ProbeDecl,
    ToolDecl,
    UpstreamDecl,
)
from ._mapping import ArgumentMap, Source
from ._rules import RULE_KINDS, RuleDecl
from ._toml_lines import TomlLines

_NAME = re.compile(r"[A-Za-z0-9_-]+")
_SEMANTICS = ("reversible", "compensable", "irreversible")


class _Doc:
    """The file being read: raises :class:`ConfigError` at the line of a key path."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.lines = TomlLines(text)

    def fail(self, where: KeyPath, message: str, value: str | None = None) -> NoReturn:
        name = ".".join(str(part) for part in where if not isinstance(part, int))
        prefix = f"{name}: " if name else ""
        line = self.lines.line_of(where, value)
        raise ConfigError(prefix + message, file=self.path, line=line)


class _Table:
    """One TOML table being read: typed access by key, and unknown keys refused at the end."""

    def __init__(self, doc: _Doc, data: Mapping[str, Any], where: KeyPath) -> None:
        self.doc, self.data, self.where = doc, data, where
        self._seen: set[str] = set()

    def get(self, key: str, kinds: tuple[type, ...], default: Any = None) -> Any:
        self._seen.add(key)
        if key not in self.data:
            return default
        value = self.data[key]
        if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
            wanted = " or ".join(_TYPE_NAMES.get(kind, kind.__name__) for kind in kinds)
            self.doc.fail((*self.where, key), f"'{key}' must be {wanted}, got {self.data[key]!r}")
        return value

    def strings(self, key: str) -> tuple[str, ...]:
        values = self.get(key, (list,), [])
        for index, item in enumerate(values):
            if not isinstance(item, str):
                self.doc.fail((*self.where, key, index), f"'{key}' must list strings, got {item!r}")
        return tuple(values)

    def string_table(self, key: str) -> dict[str, str]:
        values = self.get(key, (dict,), {})
        for name, item in values.items():
            if not isinstance(item, str):
                self.doc.fail((*self.where, key, name), f"'{name}' must be a string, got {item!r}")
        return dict(values)

    def table(self, key: str) -> _Table | None:
        value = self.get(key, (dict,))
        return None if value is None else _Table(self.doc, value, (*self.where, key))

    def done(self) -> None:
        for key in self.data:
            if key not in self._seen:
                close = difflib.get_close_matches(key, sorted(self._seen), n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                known = ", ".join(sorted(self._seen))
                self.doc.fail((*self.where, key), f"unknown setting '{key}'{hint}; known: {known}")


_TYPE_NAMES = {str: "a string", bool: "true or false", int: "an integer", float: "a number"}
_TYPE_NAMES |= {list: "a list", dict: "a table"}


def load_config(path: str | Path) -> GatewayConfig:
    """Read and check the gateway configuration at ``path`` (see the module docstring for its
    layout). Declarations are checked against the upstreams' tools when the gateway starts.

    Raises:
        ConfigError: unreadable, not TOML, or a declaration that cannot hold; the message names
            the file and the line.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the gateway configuration: {exc}", file=path) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        at = re.search(r"at line (\d+)", str(exc))
        line = int(at.group(1)) if at else None
        raise ConfigError(f"not valid TOML: {exc}", file=path, line=line) from None
    doc = _Doc(path, text)
    root = _Table(doc, data, ())
    gateway = root.table("gateway") or _Table(doc, {}, ("gateway",))
    name = gateway.get("name", (str,), "agent-saga-mcp")
    if not _NAME.fullmatch(name):
        doc.fail(("gateway", "name"), f"name may hold only letters, digits, '_' and '-': {name!r}")
    saga_name = gateway.get("saga_name", (str,), "mcp session")
    saga_tools = gateway.get("saga_tools", (bool,), True)
    gateway.done()
    approvals = _approvals(root.table("approvals"))
    upstreams_table = root.table("upstreams")
    root.done()
    if upstreams_table is None or not upstreams_table.data:
        doc.fail(("upstreams",), "declare at least one upstream ([upstreams.<name>])")
    upstreams: dict[str, UpstreamDecl] = {}
    for up_name in upstreams_table.data:
        table = upstreams_table.table(up_name)
        assert table is not None
        upstreams[up_name] = _upstream(up_name, table)
    upstreams_table.done()
    return GatewayConfig(path, text, name, saga_name, saga_tools, approvals, upstreams)


def _approvals(table: _Table | None) -> ApprovalsDecl:
    if table is None:
        return ApprovalsDecl()
    decl = ApprovalsDecl(
        approvers=table.strings("approvers"),
        elicitation=table.get("elicitation", (bool,), True),
        elicitation_approver=table.get("elicitation_approver", (str,), "mcp:client"),
        expires_after=float(table.get("expires_after", (int, float), 600.0)),
    )
    if not (math.isfinite(decl.expires_after) and decl.expires_after > 0):
        table.doc.fail((*table.where, "expires_after"), "must be a positive number of seconds")
    table.done()
    return decl


def _upstream(name: str, table: _Table) -> UpstreamDecl:
    doc, where = table.doc, table.where
    if not _NAME.fullmatch(name):
        doc.fail(where, f"an upstream's name may hold only letters, digits, '_' and '-': {name!r}")
    command = table.get("command", (str,))
    url = table.get("url", (str,))
    if (command is None) == (url is None):
        doc.fail(where, "give exactly one of 'command' (a stdio server) or 'url' (streamable HTTP)")
    if url is not None and not url.startswith(("http://", "https://")):
        doc.fail((*where, "url"), f"url must be http:// or https://, got {url!r}")
    decl_args = table.strings("args")
    env = table.string_table("env")
    pass_env = table.strings("pass_env")
    cwd = table.get("cwd", (str,))
    headers_env = table.string_table("headers_env")
    if url is None and headers_env:
        doc.fail((*where, "headers_env"), "headers_env is for upstreams reached by url")
    if url is not None and (decl_args or env or pass_env or cwd is not None):
        doc.fail(where, "args, env, pass_env and cwd are for upstreams started by command")
    prefix = table.get("prefix", (str,), "")
    hide = table.strings("hide")
    tools_table = table.table("tools")
    table.done()
    tools: dict[str, ToolDecl] = {}
    if tools_table is not None:
        for tool in tools_table.data:
            tool_table = tools_table.table(tool)
            assert tool_table is not None
            tools[tool] = _tool(name, tool, prefix + tool, tool_table)
        tools_table.done()
    for tool in hide:
        if tool in tools and tools[tool].rules:
            doc.fail(tools[tool].where, f"'{tool}' is hidden: rules on it would never apply")
    return UpstreamDecl(
        name=name,
        command=command,
        args=decl_args,
        env=env,
        pass_env=pass_env,
        cwd=cwd,
        url=url,
        headers_env=headers_env,
        prefix=prefix,
        hide=hide,
        tools=tools,
        where=where,
    )


def _tool(upstream: str, tool: str, exposed: str, table: _Table) -> ToolDecl:
    doc, where = table.doc, table.where
    semantics = table.get("semantics", (str,))
    if semantics is not None and semantics.lower() not in _SEMANTICS:
        doc.fail((*where, "semantics"), f"semantics is one of {', '.join(_SEMANTICS)}")
    compensate = _call(table.table("compensate"), probe=False)
    probe = _call(table.table("probe"), probe=True)
    redact = table.strings("redact")
    key_arg = table.get("idempotency_key", (str,))
    rules_data = table.get("rules", (list,), [])
    table.done()
    rules = tuple(_rule(doc, item, (*where, "rules", i)) for i, item in enumerate(rules_data))
    decl = ToolDecl(
        upstream=upstream,
        tool=tool,
        exposed=exposed,
        semantics=semantics.lower() if semantics is not None else None,
        compensate=compensate,
        probe=probe if isinstance(probe, ProbeDecl) else None,
        redact=redact,
        rules=rules,
        idempotency_key=key_arg,
        where=where,
    )
    _check_semantics(doc, decl)
    return decl


def _call(table: _Table | None, *, probe: bool) -> CallDecl | None:
    if table is None:
        return None
    doc, where = table.doc, table.where
    tool = table.get("tool", (str,))
    if tool is None:
        doc.fail(where, "name the upstream tool to call ('tool = ...')")
    arguments = table.string_table("arguments")
    constants = table.get("constants", (dict,), {})
    sources: dict[str, Source] = {}
    for name, text in arguments.items():
        try:
            source = Source.parse(text)
        except ValueError as exc:
            doc.fail((*where, "arguments", name), str(exc))
        if probe and source.root == "result":
            doc.fail((*where, "arguments", name), "a probe runs before any result is known")
        if source.root == "args" and source.path[0] in ("result", "idempotency_key"):
            doc.fail(
                (*where, "arguments", name), f"an argument named {source.path[0]!r} is shadowed"
            )
        sources[name] = source
    both = sorted(set(sources) & set(constants))
    if both:
        doc.fail((*where, "constants", both[0]), f"'{both[0]}' is both mapped and constant")
    mapping = ArgumentMap(sources, dict(constants))
    if not probe:
        table.done()
        return CallDecl(tool, mapping, where)
    landed = _source(table, "landed", required=True)
    result = _source(table, "result", required=False)
    table.done()
    assert landed is not None
    for name, read in (("landed", landed), ("result", result)):
        if read is not None and read.root != "result":
            doc.fail((*where, name), f"'{name}' is read from the probe's result ('result...')")
    return ProbeDecl(tool, mapping, where, landed, result)


def _source(table: _Table, key: str, *, required: bool) -> Source | None:
    text = table.get(key, (str,))
    if text is None:
        if required:
            table.doc.fail(table.where, f"'{key}' is required (e.g. 'result.found')")
        return None
    try:
        return Source.parse(text)
    except ValueError as exc:
        table.doc.fail((*table.where, key), str(exc))


def _rule(doc: _Doc, item: object, where: KeyPath) -> RuleDecl:
    if not isinstance(item, dict):
        doc.fail(where, f"each rule is a table ([[...rules]]), got {item!r}")
    table = _Table(doc, item, where)
    kind = table.get("rule", (str,))
    if kind not in RULE_KINDS:
        known = ", ".join(RULE_KINDS)
        doc.fail((*where, "rule"), f"'rule' is one of {known}; got {kind!r}")
    params: dict[str, Any] = {}
    for name, param in RULE_KINDS[kind].items():
        value = table.get(name, param.types)
        if value is None:
            if param.required:
                doc.fail(where, f"a {kind} rule needs '{name}'")
            value = list(param.default) if isinstance(param.default, list) else param.default
        params[name] = value
    table.done()
    decl = RuleDecl(kind, params, where)
    try:
        decl.build("probe-only", None)
    except (ValueError, TypeError, ConfigurationError) as exc:
        doc.fail(where, f"{kind}: {exc}")
    return decl


def _stub(**given: Any) -> None:
    return None


def _check_semantics(doc: _Doc, decl: ToolDecl) -> None:
    """The core's own checks on a declaration (semantics against compensation and probe)."""
    try:
        ToolCallGuard(
            decl.exposed,
            semantics=decl.semantics,
            compensate="check" if decl.compensate is not None else None,
            probe=_stub if decl.probe is not None else None,
            registry=CompensatorRegistry(),
        )
    except ConfigurationError as exc:
        doc.fail(decl.where, str(exc).replace(decl.exposed + ": ", ""))


__all__ = ["load_config"]
