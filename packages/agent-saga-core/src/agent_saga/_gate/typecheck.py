"""Argument validation from a tool's type hints, as a gate rule.

A missing or unexpected argument is already refused when the call is bound to the signature
(:class:`~agent_saga.ArgumentsRefused`, rule ``signature``). :class:`ArgumentTypes` adds the
types: ``dose_mg: float`` refuses ``"500"``, ``items: list[Item]`` checks every item. It reads
the hints once per tool. Supported: plain classes (``isinstance``), ``None``, unions and
``Optional``, ``Literal``, ``Annotated``, ``list``/``set``/``frozenset``/``Sequence``,
``tuple`` (fixed and ``...``), ``dict``/``Mapping``, ``TypedDict``, ``NewType`` and
``Callable``. ``bool`` is not accepted for ``int`` or ``float``; ``int`` is for ``float``.
Hints it cannot check (``Any``, a ``TypeVar``, a non-runtime ``Protocol``) accept any value and
are listed by :meth:`ArgumentTypes.unchecked`; hints that cannot even be resolved refuse the
call.
"""

from __future__ import annotations

import threading
import types
import typing
from collections import abc
from collections.abc import Iterable
from typing import Any

from .decisions import ALLOW, Decision, Deny, ToolCall, ToolSignature
from .rules import describe_scope, tool_scope

_MAX_DEPTH = 32
_SEQUENCES = (list, abc.Sequence, abc.MutableSequence, abc.Collection, abc.Iterable)
_SETS = (set, frozenset, abc.Set, abc.MutableSet)
_MAPPINGS = (dict, abc.Mapping, abc.MutableMapping)
_UNCHECKED = object()


def _name(hint: object) -> str:
    if isinstance(hint, type):
        return hint.__name__
    return str(hint).replace("typing.", "")


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_value(value: object, hint: Any, where: str, depth: int = 0) -> str | None:
    """Why ``value`` does not fit ``hint`` (naming the field ``where``), or ``None`` if it does."""
    if depth > _MAX_DEPTH:
        return f"{where} is nested more than {_MAX_DEPTH} levels deep"
    if hint is Any or hint is object or isinstance(hint, typing.TypeVar):
        return None
    if hint is None or hint is type(None):
        return None if value is None else f"{where} must be None, got {_short(value)}"
    supertype = getattr(hint, "__supertype__", None)
    if supertype is not None:  # NewType
        return check_value(value, supertype, where, depth + 1)
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Annotated:
        return check_value(value, args[0], where, depth + 1)
    if origin is typing.Union or origin is types.UnionType:
        problems = [check_value(value, option, where, depth + 1) for option in args]
        if None in problems:
            return None
        others = [p for option, p in zip(args, problems, strict=True) if option is not type(None)]
        if len(others) == 1:  # Optional[X]: say what is wrong inside X
            return others[0]
        return f"{where} must be {_name(hint)}, got {type(value).__name__} {_short(value)}"
    if origin is typing.Literal:
        if any(type(value) is type(option) and value == option for option in args):
            return None
        return f"{where} must be one of {list(args)!r}, got {_short(value)}"
    if origin is not None:
        return _check_generic(value, origin, args, hint, where, depth)
    if typing.is_typeddict(hint):
        return _check_typeddict(value, hint, where, depth)
    return _check_class(value, hint, where)


def _check_class(value: object, hint: Any, where: str) -> str | None:
    if hint is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif hint is complex:
        ok = isinstance(value, int | float | complex) and not isinstance(value, bool)
    elif isinstance(hint, type):
        try:
            ok = isinstance(value, hint)
        except TypeError:  # a Protocol that is not runtime-checkable: cannot be checked
            return None
    else:
        return None  # not a class and not a construct above: left unchecked
    if ok:
        return None
    return f"{where} must be {_name(hint)}, got {type(value).__name__} {_short(value)}"


def _check_generic(
    value: object, origin: Any, args: tuple[Any, ...], hint: Any, where: str, depth: int
) -> str | None:
    wrong = f"{where} must be {_name(hint)}, got {type(value).__name__} {_short(value)}"
    if origin is tuple:
        if not isinstance(value, tuple | list):
            return wrong
        if not args:
            items = []
        elif len(args) == 2 and args[1] is Ellipsis:
            items = [(args[0], item) for item in value]
        else:
            if len(value) != len(args):
                return f"{where} must have {len(args)} items, got {len(value)}"
            items = list(zip(args, value, strict=True))
        for index, (item_hint, item) in enumerate(items):
            problem = check_value(item, item_hint, f"{where}.{index}", depth + 1)
            if problem:
                return problem
        return None
    if origin in _MAPPINGS:
        if not isinstance(value, abc.Mapping):
            return wrong
        key_hint, value_hint = args if len(args) == 2 else (Any, Any)
        for key, item in value.items():
            problem = check_value(key, key_hint, f"{where} key", depth + 1) or check_value(
                item, value_hint, f"{where}.{key}", depth + 1
            )
            if problem:
                return problem
        return None
    if origin in _SETS or origin in _SEQUENCES:
        kinds: tuple[type, ...] = (set, frozenset) if origin in _SETS else (list, tuple)
        if origin is list:
            kinds = (list,)
        if not isinstance(value, kinds):
            return wrong
        item_hint = args[0] if args else Any
        for index, item in enumerate(typing.cast("Iterable[object]", value)):
            problem = check_value(item, item_hint, f"{where}.{index}", depth + 1)
            if problem:
                return problem
        return None
    if origin is abc.Callable:
        return None if callable(value) else wrong
    if origin is type:
        return None if isinstance(value, type) else wrong
    if isinstance(origin, type):
        try:
            return None if isinstance(value, origin) else wrong
        except TypeError:
            return None
    return None


def _check_typeddict(value: object, hint: Any, where: str, depth: int) -> str | None:
    if not isinstance(value, abc.Mapping):
        return f"{where} must be a mapping ({hint.__name__}), got {type(value).__name__}"
    fields = typing.get_type_hints(hint, include_extras=True)
    for key in sorted(hint.__required_keys__):
        if key not in value:
            return f"{where}.{key} is missing"
    for key, item in value.items():
        if key not in fields:
            return f"{where}.{key} is not a field of {hint.__name__}"
        problem = check_value(item, fields[key], f"{where}.{key}", depth + 1)
        if problem:
            return problem
    return None


class ArgumentTypes:
    """Refuse calls whose arguments do not match the tool's type hints, naming the field.

    Needs the tool's declaration, which the engine puts on every call it gates; a call that
    carries none (built by hand) is refused.
    """

    kind = "rule"

    def __init__(
        self, *, tools: Iterable[str] | str | None = None, name: str = "argument_types"
    ) -> None:
        self.tools = tool_scope(tools)
        self.name = name
        self._hints: dict[ToolSignature, dict[str, Any] | str] = {}
        self._lock = threading.Lock()

    def _hints_of(self, spec: ToolSignature) -> dict[str, Any] | str:
        hints = self._hints.get(spec)
        if hints is not None:
            return hints
        try:
            found: dict[str, Any] | str = {
                key: hint
                for key, hint in typing.get_type_hints(spec.func, include_extras=True).items()
                if key != "return" and key in spec.signature.parameters
            }
        except Exception as exc:
            found = f"type hints of {spec.name} cannot be resolved: {type(exc).__name__}: {exc}"
        with self._lock:
            self._hints[spec] = found
        return found

    def evaluate(self, call: ToolCall) -> Decision:
        if self.tools is not None and call.tool not in self.tools:
            return ALLOW
        if call.spec is None:
            return Deny(self.name, f"{call.tool}: no tool declaration to check the arguments")
        hints = self._hints_of(call.spec)
        if isinstance(hints, str):
            return Deny(self.name, hints)
        for key, value in call.args.items():
            hint = hints.get(key, _UNCHECKED)
            if hint is _UNCHECKED:
                continue
            problem = check_value(value, hint, f"argument {key!r}")
            if problem:
                return Deny(self.name, problem)
        return ALLOW

    def unchecked(self, spec: ToolSignature) -> list[str]:
        """Parameters of ``spec`` that have no hint, so any value passes."""
        hints = self._hints_of(spec)
        if isinstance(hints, str):
            return []
        return [key for key in spec.signature.parameters if key not in hints]

    def describe(self) -> str:
        return f"arguments match the tools' type hints on {describe_scope(self.tools)}"


__all__ = ["ArgumentTypes", "check_value"]
