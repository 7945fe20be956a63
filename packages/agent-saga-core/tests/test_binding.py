"""The fast argument binder agrees with ``inspect.Signature.bind`` on every call shape."""

from __future__ import annotations

import inspect
from typing import Any

from agent_saga import REVERSIBLE, tool, tool_spec
from hypothesis import given, settings
from hypothesis import strategies as st


def f1(a: int, b: int = 2, *, c: int = 3, idempotency_key: str = "") -> None: ...
def f2(a: int, b: int, c: int) -> None: ...
def f3(*, k: int, m: int = 0) -> None: ...
def f4(a: int, *rest: int, **extra: int) -> None: ...
def f5(a: int, /, b: int = 1) -> None: ...


FUNCS = [f1, f2, f3, f4, f5]
NAMES = ["a", "b", "c", "k", "m", "z", "idempotency_key"]


def reference(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | str:
    try:
        bound = inspect.signature(func).bind(*args, **kwargs)
    except TypeError:
        return "TypeError"
    bound.apply_defaults()
    out: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        kind = inspect.signature(func).parameters[name].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            out.update(value)
        elif kind is inspect.Parameter.VAR_POSITIONAL:
            out[name] = list(value)
        else:
            out[name] = value
    out.pop("idempotency_key", None)
    return out


@settings(max_examples=400, derandomize=True)
@given(
    st.sampled_from(FUNCS),
    st.lists(st.integers(0, 9), max_size=4).map(tuple),
    st.dictionaries(st.sampled_from(NAMES), st.integers(0, 9), max_size=4),
)
def test_fast_bind_matches_inspect(
    func: Any, args: tuple[int, ...], kwargs: dict[str, int]
) -> None:
    spec = tool_spec(tool(func, semantics=REVERSIBLE, name=f"bind.{func.__name__}"))
    assert spec is not None
    try:
        ours: dict[str, Any] | str = spec.bind(args, kwargs)
    except TypeError:
        ours = "TypeError"
    assert ours == reference(func, args, kwargs)
