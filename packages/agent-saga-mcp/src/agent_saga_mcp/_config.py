"""The gateway's configuration file: what it holds, as frozen dataclasses.

Reading it (:func:`agent_saga_mcp.load_config`, :mod:`agent_saga_mcp._config_read`) checks
everything that can be checked without the upstreams: types, unknown keys, rule parameters,
mapping syntax, semantics that contradict the compensation. What needs the upstreams' tool
lists (does that tool, that field exist?) is checked when the gateway connects
(:mod:`agent_saga_mcp._catalog`). Every mistake is a :class:`ConfigError` naming the file and
the line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from agent_saga import AgentSagaError

from ._mapping import ArgumentMap, Source
from ._rules import RuleDecl
from ._toml_lines import TomlLines

KeyPath = tuple[str | int, ...]


class ConfigError(AgentSagaError):
    """A mistake in the gateway's configuration, with the file and line where it is written."""

    def __init__(self, message: str, *, file: Path | None = None, line: int | None = None) -> None:
        self.message = message
        self.file = file
        self.line = line
        where = f"{file}:{line}: " if file is not None and line is not None else ""
        where = where or (f"{file}: " if file is not None else "")
        super().__init__(f"{where}{message}")


@dataclass(frozen=True)
class CallDecl:
    """Another upstream tool called on the original call's behalf (a compensation)."""

    tool: str
    arguments: ArgumentMap
    where: KeyPath


@dataclass(frozen=True)
class ProbeDecl(CallDecl):
    """An upstream call that tells whether the original call landed.

    ``landed`` is read from the probe's result: a false value means it did not land; a true one
    that it did, and then ``result`` (if given) is the original call's result.
    """

    landed: Source = field(default_factory=lambda: Source("result"))
    result: Source | None = None


@dataclass(frozen=True)
class ToolDecl:
    """What the configuration declares about one upstream tool."""

    upstream: str
    tool: str
    exposed: str
    semantics: str | None
    compensate: CallDecl | None
    probe: ProbeDecl | None
    redact: tuple[str, ...]
    rules: tuple[RuleDecl, ...]
    idempotency_key: str | None
    where: KeyPath


@dataclass(frozen=True)
class UpstreamDecl:
    """One upstream MCP server: how to reach it, how its tools are named and which are hidden."""

    name: str
    command: str | None
    args: tuple[str, ...]
    env: Mapping[str, str]
    pass_env: tuple[str, ...]
    cwd: str | None
    url: str | None
    headers_env: Mapping[str, str]
    prefix: str
    hide: tuple[str, ...]
    tools: Mapping[str, ToolDecl]
    where: KeyPath

    def exposed(self, tool: str) -> str:
        """The name the client sees for upstream tool ``tool``."""
        return f"{self.prefix}{tool}"

    @property
    def target(self) -> str:
        """The command line or URL, for messages."""
        return self.url if self.url is not None else " ".join((self.command or "", *self.args))


@dataclass(frozen=True)
class ApprovalsDecl:
    """Who approves IRREVERSIBLE calls and calls a rule sends to a human."""

    approvers: tuple[str, ...] = ()
    elicitation: bool = True
    elicitation_approver: str = "mcp:client"
    expires_after: float = 600.0

    @property
    def all_approvers(self) -> tuple[str, ...]:
        extra = (self.elicitation_approver,) if self.elicitation else ()
        return tuple(dict.fromkeys((*self.approvers, *extra)))


@dataclass(frozen=True)
class GatewayConfig:
    """A whole gateway configuration, read from ``path``."""

    path: Path
    text: str
    name: str
    saga_name: str
    saga_tools: bool
    approvals: ApprovalsDecl
    upstreams: Mapping[str, UpstreamDecl]

    def lines(self) -> TomlLines:
        return TomlLines(self.text)

    def error(self, where: KeyPath, message: str, value: str | None = None) -> ConfigError:
        """A :class:`ConfigError` for the key at ``where`` (its line found in the text)."""
        return ConfigError(message, file=self.path, line=self.lines().line_of(where, value))

    def compensator_name(self, upstream: str, tool: str) -> str:
        """The registered name of the compensation declared for ``upstream``'s ``tool``:
        what the log records and what recovery in another process looks up."""
        return f"mcp:{self.name}/{upstream}/{tool}"

    def declarations(self) -> list[ToolDecl]:
        return [decl for up in self.upstreams.values() for decl in up.tools.values()]


__all__ = [
    "ApprovalsDecl",
    "CallDecl",
    "ConfigError",
    "GatewayConfig",
    "KeyPath",
    "ProbeDecl",
    "ToolDecl",
    "UpstreamDecl",
]
