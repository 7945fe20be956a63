"""Scripted tools: real agent-saga tools whose outcome per call is written in the test.

A scripted tool is declared through the kit like any user tool (gated, logged, compensated);
only its body is a script: call ``n`` returns ``outcomes[n]``, or raises it when it is an
exception. Every call and every compensation is recorded, so a test can assert what the agent
did and what was undone, with which idempotency keys.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from agent_saga import AgentKit, Semantics


class ScriptedCall(NamedTuple):
    """One call of a scripted tool or of its compensation."""

    args: dict[str, Any]
    idempotency_key: str | None
    result: Any = None


class _Script:
    def __init__(self, outcomes: Sequence[object], then: object) -> None:
        self.outcomes = list(outcomes)
        self.then = then

    def play(self, index: int) -> Any:
        outcome = self.outcomes[index] if index < len(self.outcomes) else self.then
        if isinstance(outcome, BaseException) or (
            isinstance(outcome, type) and issubclass(outcome, BaseException)
        ):
            raise outcome
        return outcome


class ScriptedTool:
    """A tool whose calls follow a script; create it with the ``saga_scripted_tool`` fixture.

    Args:
        kit: the kit the tool is declared in (its compensators' registry).
        name: the tool's name in the log.
        outcomes: per call, a value to return or an exception (instance or class) to raise.
        then: the outcome of every call after the script runs out (default ``None``).
        params: the tool's parameter names (positional or keyword); it also accepts
            ``idempotency_key``, which the engine fills with the step's key.
        semantics: as for ``@tool``; COMPENSABLE when the tool has a compensation.
        undo: give the tool a recording compensation (``undone`` lists its calls) unless
            ``compensate`` is given.
        undo_outcomes: per compensation call, ``None`` or an exception to raise.
        compensate: a compensation of your own (registered name or callable).
    """

    def __init__(
        self,
        kit: AgentKit,
        name: str,
        outcomes: Sequence[object] = (),
        *,
        then: object = None,
        params: Sequence[str] = (),
        semantics: Semantics | str | None = None,
        undo: bool = True,
        undo_outcomes: Sequence[object] = (),
        compensate: object = None,
    ) -> None:
        for param in params:
            if not param.isidentifier() or param == "idempotency_key":
                raise ValueError(f"invalid parameter name for a scripted tool: {param!r}")
        self.name = name
        self.calls: list[ScriptedCall] = []
        self.undone: list[ScriptedCall] = []
        self._script = _Script(outcomes, then)
        self._undo_script = _Script(undo_outcomes, None)
        self._lock = threading.Lock()
        plain = inspect.Parameter.POSITIONAL_OR_KEYWORD
        self._signature = inspect.Signature(
            [inspect.Parameter(p, plain) for p in params]
            + [inspect.Parameter("idempotency_key", inspect.Parameter.KEYWORD_ONLY, default=None)]
        )
        if compensate is None and undo:
            compensate = self._undo
        self.tool = kit.tool(_bodied(self), name=name, semantics=semantics, compensate=compensate)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the tool (through the current transaction, if any)."""
        return self.tool(*args, **kwargs)

    def _body(self, *args: Any, **kwargs: Any) -> Any:
        bound = self._signature.bind(*args, **kwargs)
        bound.apply_defaults()
        named = dict(bound.arguments)
        key = named.pop("idempotency_key", None)
        with self._lock:
            index = len(self.calls)
            self.calls.append(ScriptedCall(named, key))
        result = self._script.play(index)
        with self._lock:
            self.calls[index] = ScriptedCall(named, key, result)
        return result

    def _undo(self, **kwargs: Any) -> None:
        key = kwargs.pop("idempotency_key", None)
        result = kwargs.pop("result", None)
        with self._lock:
            index = len(self.undone)
            self.undone.append(ScriptedCall(kwargs, key, result))
        self._undo_script.play(index)

    @property
    def call_count(self) -> int:
        return len(self.calls)

    def __repr__(self) -> str:
        return f"ScriptedTool({self.name!r}, calls={len(self.calls)}, undone={len(self.undone)})"


def _bodied(scripted: ScriptedTool) -> Any:
    """A plain function for ``kit.tool``: it carries the script's signature and name."""

    def body(*args: Any, **kwargs: Any) -> Any:
        return scripted._body(*args, **kwargs)

    body.__signature__ = scripted._signature  # type: ignore[attr-defined]
    body.__name__ = body.__qualname__ = scripted.name.replace(".", "_")
    body.__module__ = "pytest_agent_saga.scripted"
    return body
