"""Arguments of a compensation or probe call, mapped from the original call.

A mapping names, for each argument of the call to make, where its value comes from:

* ``"args.<path>"``: the original call's arguments (``args.repo``, ``args.card.last4``);
* ``"result"`` or ``"result.<path>"``: the original call's structured result (its
  ``structuredContent``, or the JSON object its only text block holds);
* ``"idempotency_key"``: the key agent-saga derives for this compensation (stable across
  retries and processes, so an upstream that deduplicates on it undoes the effect once).

Constant arguments are given apart (``constants = { state = "closed" }``), so a string value is
never mistaken for a path. Path segments are object keys, or list indexes written as digits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from agent_saga import AgentSagaError

Root = Literal["args", "result", "idempotency_key"]
ROOTS: tuple[Root, ...] = ("args", "result", "idempotency_key")


class MappingError(AgentSagaError):
    """A mapped value cannot be found in the call it is taken from."""


@dataclass(frozen=True)
class Source:
    """Where one mapped value comes from: a root and a path inside it."""

    root: Root
    path: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: object) -> Source:
        """Read ``"args.x"``, ``"result"``, ``"result.x.0"`` or ``"idempotency_key"``.

        Raises:
            ValueError: anything else, with what is allowed.
        """
        if not isinstance(text, str) or not text:
            raise ValueError(f"a mapped value is a string such as 'args.id', got {text!r}")
        head, _, rest = text.partition(".")
        if head not in ROOTS:
            raise ValueError(
                f"{text!r} must start with 'args.', 'result' or be 'idempotency_key' "
                "(put literal values under 'constants')"
            )
        parts = tuple(rest.split(".")) if rest else ()
        if any(not part for part in parts):
            raise ValueError(f"{text!r} has an empty path segment")
        if head == "args" and not parts:
            raise ValueError(f"{text!r} must name an argument ('args.<name>')")
        if head == "idempotency_key" and parts:
            raise ValueError(f"{text!r}: 'idempotency_key' has no fields")
        return cls(head, parts)

    def __str__(self) -> str:
        return ".".join((self.root, *self.path))

    def resolve(self, args: Mapping[str, Any], result: Any, key: str | None) -> Any:
        """The value this source names in one call.

        Raises:
            MappingError: a key or index on the path is missing, or the root has no value.
        """
        if self.root == "idempotency_key":
            if key is None:
                raise MappingError("no idempotency key is available here")
            return key
        value: Any = args if self.root == "args" else result
        if self.root == "result" and value is None:
            raise MappingError(f"{self}: the call's result was not recorded (no structured result)")
        for depth, part in enumerate(self.path):
            value = _step_into(value, part, self, depth)
        return value


def _step_into(value: Any, part: str, source: Source, depth: int) -> Any:
    where = ".".join((source.root, *source.path[: depth + 1]))
    if isinstance(value, Mapping):
        if part in value:
            return value[part]
        raise MappingError(f"{where} is missing (found keys: {sorted(map(str, value))[:10]})")
    if isinstance(value, list) and part.isdigit() and int(part) < len(value):
        return value[int(part)]
    raise MappingError(f"{where} is missing ({type(value).__name__} has no {part!r})")


@dataclass(frozen=True)
class ArgumentMap:
    """The arguments of one call to make, from sources and constants."""

    sources: Mapping[str, Source]
    constants: Mapping[str, Any]

    def names(self) -> set[str]:
        return set(self.sources) | set(self.constants)

    def build(self, args: Mapping[str, Any], result: Any, key: str | None) -> dict[str, Any]:
        """The call's arguments for the original call's ``args`` and ``result``.

        Raises:
            MappingError: a source cannot be resolved; the message names the argument.
        """
        built = dict(self.constants)
        for name, source in self.sources.items():
            try:
                built[name] = source.resolve(args, result, key)
            except MappingError as exc:
                raise MappingError(f"argument {name!r} from {source}: {exc}") from None
        return built


def schema_property(schema: Mapping[str, Any] | None, path: tuple[str, ...]) -> str | None:
    """Why ``path`` names no field of the object ``schema`` describes, or ``None`` if it may.

    A level with no ``properties`` (free-form objects, arrays, ``anyOf``...) accepts anything
    below it: only fields a schema spells out can be checked.
    """
    current: Any = schema
    for depth, part in enumerate(path):
        if not isinstance(current, Mapping):
            return None
        properties = current.get("properties")
        if not isinstance(properties, Mapping):
            items = current.get("items")
            if part.isdigit() and isinstance(items, Mapping):
                current = items
                continue
            return None
        if part not in properties:
            where = ".".join(path[: depth + 1])
            known = ", ".join(sorted(map(str, properties))) or "none"
            return f"no field {where!r} (fields: {known})"
        current = properties[part]
    return None


def required_fields(schema: Mapping[str, Any] | None) -> set[str]:
    """The top-level fields an input schema requires."""
    if not isinstance(schema, Mapping):
        return set()
    required = schema.get("required")
    return {str(name) for name in required} if isinstance(required, list) else set()


__all__ = ["ArgumentMap", "MappingError", "Source", "required_fields", "schema_property"]
