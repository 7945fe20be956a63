"""Gate rules declared in the gateway's configuration, built from the core's rule library.

Each ``[[upstreams.<u>.tools.<t>.rules]]`` table names a ``rule`` and its parameters; the rule
is scoped to that one tool (by the name the client sees). Nothing here decides anything: the
core's ``Range``, ``MaxValue``, ``AllowValues``, ``DenyValues``, ``RateLimit``,
``require_approval`` and ``Budget`` do, composed strictest-wins by the core's gate.

The gateway adds one rule of its own, :class:`InputSchemaRule`: a call whose arguments do not
match the upstream tool's ``inputSchema`` is refused before it reaches the upstream, so the
model gets a refusal it can correct instead of an upstream error that fails the transaction.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_saga import (
    Allow,
    AllowValues,
    Budget,
    Decision,
    Deny,
    DenyValues,
    FileBudgetStore,
    MaxValue,
    MemoryBudgetStore,
    Range,
    RateLimit,
    Rule,
    ToolCall,
    require_approval,
)

_NUMBER = (int, float)


@dataclass(frozen=True)
class Param:
    """One parameter of a rule kind: accepted types, whether required, its default."""

    types: tuple[type, ...]
    required: bool = False
    default: object = None


RULE_KINDS: dict[str, dict[str, Param]] = {
    "range": {
        "path": Param((str,), required=True),
        "low": Param(_NUMBER),
        "high": Param(_NUMBER),
        "unit": Param((str,), default=""),
        "name": Param((str,), default="range"),
    },
    "max_value": {
        "path": Param((str,), default="amount"),
        "limit": Param(_NUMBER, required=True),
        "name": Param((str,), default="max_value"),
    },
    "allow_values": {
        "path": Param((str,), required=True),
        "values": Param((list,), required=True),
        "name": Param((str,), default="allow_values"),
    },
    "deny_values": {
        "path": Param((str,), required=True),
        "values": Param((list,), required=True),
        "name": Param((str,), default="deny_values"),
    },
    "rate_limit": {
        "calls": Param((int,), required=True),
        "seconds": Param(_NUMBER, required=True),
        "per": Param((str,), default="tool"),
        "name": Param((str,), default="rate_limit"),
    },
    "require_approval": {
        "path": Param((str,)),
        "above": Param(_NUMBER),
        "reason": Param((str,), default="needs a human approval"),
        "approvers": Param((list,), default=[]),
        "quorum": Param((int,), default=1),
        "name": Param((str,), default="require_approval"),
    },
    "budget": {
        "name": Param((str,), required=True),
        "limit": Param(_NUMBER, required=True),
        "amount": Param((str,), default="amount"),
        "per": Param((str,), default="all"),
        "window": Param(_NUMBER),
    },
}
"""Every rule a configuration may declare, with its parameters."""

_PATH_PARAM = {
    "range": "path",
    "max_value": "path",
    "allow_values": "path",
    "deny_values": "path",
    "require_approval": "path",
    "budget": "amount",
}


@dataclass(frozen=True)
class Above:
    """``require_approval`` when the number at ``path`` exceeds ``above`` (or is not a number,
    which cannot be compared and so goes to a human too)."""

    path: str
    above: float

    def __call__(self, call: ToolCall) -> bool:
        value = call.arg(self.path)
        if isinstance(value, bool) or not isinstance(value, _NUMBER):
            return True
        return not value <= self.above


def _always(call: ToolCall) -> bool:
    return True


@dataclass(frozen=True)
class RuleDecl:
    """One declared rule: its kind and parameters (defaults applied), and where it was read."""

    kind: str
    params: Mapping[str, Any]
    where: tuple[str | int, ...]

    @property
    def reads(self) -> str | None:
        """The argument path the rule reads (checked against the tool's input schema)."""
        key = _PATH_PARAM.get(self.kind)
        value = self.params.get(key) if key else None
        return value if isinstance(value, str) else None

    def build(self, tool: str, home: Path | None) -> Rule:
        """The core rule, scoped to ``tool``; a budget keeps its account in ``home``.

        Raises:
            ValueError, TypeError, agent_saga.ConfigurationError: parameters the core refuses.
        """
        p = self.params
        if self.kind == "range":
            return Range(p["path"], p["low"], p["high"], tools=tool, unit=p["unit"], name=p["name"])
        if self.kind == "max_value":
            return MaxValue(p["limit"], path=p["path"], tools=frozenset({tool}), name=p["name"])
        if self.kind in ("allow_values", "deny_values"):
            kind = AllowValues if self.kind == "allow_values" else DenyValues
            return kind(p["path"], p["values"], tools=tool, name=p["name"])
        if self.kind == "rate_limit":
            return RateLimit(p["calls"], p["seconds"], tools=tool, per=p["per"], name=p["name"])
        if self.kind == "require_approval":
            return require_approval(
                _predicate(p),
                reason=p["reason"],
                tools=tool,
                name=p["name"],
                approvers=p["approvers"],
                quorum=p["quorum"],
            )
        store = FileBudgetStore(home) if home is not None else MemoryBudgetStore()
        return Budget(
            p["name"],
            p["limit"],
            amount=p["amount"],
            tools=tool,
            per=p["per"],
            window=p["window"],
            store=store,
        )


def _predicate(params: Mapping[str, Any]) -> Callable[[ToolCall], bool]:
    path, above = params.get("path"), params.get("above")
    if (path is None) != (above is None):
        raise ValueError("require_approval takes both 'path' and 'above', or neither (always)")
    if path is None or above is None:
        return _always
    if not math.isfinite(above):
        raise ValueError(f"'above' must be a finite number, got {above!r}")
    return Above(path, float(above))


class InputSchemaRule:
    """Refuse calls whose arguments do not match the upstream tool's ``inputSchema``.

    ``schemas`` maps each exposed tool to its input schema. A schema that is not valid JSON
    Schema is not checked (the upstream answers for it); ``optional`` names arguments the
    gateway fills in itself (an idempotency key), which may be left out.

    Each schema is compiled once, twice over: by ``jsonschema-rs`` (compiled code, a few
    microseconds a call), which admits the arguments that match, and by ``jsonschema``, which
    has the last word on arguments the first did not admit and words the refusal. So a refusal
    and its reason are always ``jsonschema``'s; the fast check only lets valid calls through
    sooner. It never fetches anything: a schema whose ``$ref`` points outside itself is
    checked by ``jsonschema`` alone (which does not fetch either).
    """

    kind = "rule"
    name = "input_schema"

    def __init__(
        self, schemas: Mapping[str, Mapping[str, Any]], optional: Mapping[str, set[str]]
    ) -> None:
        import jsonschema  # type: ignore[import-untyped]  # a dependency of mcp

        self._validators: dict[str, Any] = {}
        self._fast: dict[str, Any] = {}
        for tool, schema in schemas.items():
            relaxed = dict(schema)
            skip = optional.get(tool, set()) | {"idempotency_key"}
            required = relaxed.get("required")
            if isinstance(required, list):
                relaxed["required"] = [field for field in required if field not in skip]
            kind = jsonschema.validators.validator_for(relaxed)
            try:
                kind.check_schema(relaxed)
            except jsonschema.SchemaError:
                continue
            self._validators[tool] = kind(relaxed)
            fast = _compiled(relaxed)
            if fast is not None:
                self._fast[tool] = fast

    def evaluate(self, call: ToolCall) -> Decision:
        validator = self._validators.get(call.tool)
        if validator is None:
            return Allow()
        arguments = dict(call.args)
        fast = self._fast.get(call.tool)
        if fast is not None:
            try:
                if fast.is_valid(arguments):
                    return Allow()
            except (ValueError, TypeError, OverflowError):  # a value it cannot hold: see below
                pass
        errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.path))
        if not errors:
            return Allow()
        first = errors[0]
        where = ".".join(str(part) for part in first.path) or "arguments"
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        return Deny(self.name, f"{where}: {first.message}{more}")

    def describe(self) -> str:
        return f"arguments match the inputSchema of {len(self._validators)} upstream tool(s)"


def _no_fetch(uri: str) -> Any:
    raise ValueError(f"the gateway does not fetch schemas ({uri})")


def _compiled(schema: Mapping[str, Any]) -> Any:
    """``schema`` compiled by ``jsonschema-rs`` (formats not asserted, as by ``jsonschema``),
    or ``None`` when it cannot be (a reference it would have to fetch, a keyword it refuses)
    or when it would judge otherwise than ``jsonschema`` (a ``multipleOf`` that is not an
    integer: ``jsonschema`` divides binary floats and refuses 0.07 for 0.01)."""
    import jsonschema_rs

    if _float_multiple(schema):
        return None
    try:
        return jsonschema_rs.validator_for(
            dict(schema), validate_formats=False, retriever=_no_fetch
        )
    except (jsonschema_rs.ValidationError, ValueError, TypeError):
        return None


def _float_multiple(schema: object) -> bool:
    """Whether ``schema`` holds a ``multipleOf`` that is not an integer, at any depth."""
    if isinstance(schema, Mapping):
        multiple = schema.get("multipleOf")
        if isinstance(multiple, float):
            return True
        return any(_float_multiple(value) for value in schema.values())
    if isinstance(schema, list):
        return any(_float_multiple(value) for value in schema)
    return False


__all__ = ["RULE_KINDS", "Above", "InputSchemaRule", "Param", "RuleDecl"]
