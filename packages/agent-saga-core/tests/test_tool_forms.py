"""Declaring tools and transactions in every supported form."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
from typing import Any

import pytest
from agent_saga import (
    COMPENSABLE,
    REVERSIBLE,
    AgentKit,
    ConfigurationError,
    Kind,
    SagaRolledBack,
    Semantics,
    compensator,
    current_saga,
    idempotency_key,
    saga_scope,
    tool,
    tool_spec,
    use_kit,
)
from agent_saga.testing import Ledger

LEDGER = Ledger()


@compensator("tests.forms.undo_add")
def undo_add(result: int, idempotency_key: str) -> None:
    LEDGER.record("undo_add", idempotency_key)


@tool(semantics=REVERSIBLE)
def bare_read(x: int, y: int = 2) -> int:
    """Adds two numbers."""
    return x + y


@tool(name="tests.add", compensate="tests.forms.undo_add")
def add(x: int, y: int, *, idempotency_key: str = "") -> int:
    """Adds and remembers."""
    LEDGER.record("add", idempotency_key)
    return x + y


@tool(name="tests.async_add", compensate="tests.forms.undo_add")
async def async_add(x: int, y: int, idempotency_key: str = "") -> int:
    """Adds asynchronously."""
    await asyncio.sleep(0)
    LEDGER.record("async_add", idempotency_key)
    return x + y


def kinds(kit: AgentKit) -> list[str]:
    return [r.kind for r in kit.store.records()]


def test_wrapper_keeps_name_doc_signature() -> None:
    assert add.__name__ == "add"
    assert add.__doc__ == "Adds and remembers."
    assert list(inspect.signature(add).parameters) == ["x", "y", "idempotency_key"]
    spec = tool_spec(add)
    assert spec is not None
    assert inspect.signature(add) == inspect.signature(spec.func)
    assert bare_read.__doc__ == "Adds two numbers."
    assert inspect.iscoroutinefunction(async_add)
    assert spec.name == "tests.add"
    assert spec.semantics is COMPENSABLE


def test_bare_decorator_and_plain_call() -> None:
    @tool
    def send(to: str) -> str:
        return to

    def raw(a: int) -> int:
        return a * 2

    wrapped = tool(raw, semantics=REVERSIBLE, name="tests.raw")
    spec = tool_spec(send)
    assert spec is not None
    # No compensation declared: IRREVERSIBLE, never guessed from the name.
    assert spec.semantics is Semantics.IRREVERSIBLE
    assert wrapped(21) == 42
    assert tool_spec(raw) is None


def test_outside_transaction_runs_untouched() -> None:
    before = LEDGER.count("add")
    assert current_saga() is None
    assert add(1, 2) == 3
    # The function got exactly what it was given: no injected key.
    assert LEDGER.events()[-1].key == ""
    assert LEDGER.count("add") == before + 1
    assert asyncio.run(async_add(1, 1)) == 2


def test_sync_tool_returns_value_not_coroutine(kit: AgentKit) -> None:
    with kit.transaction("t"):
        value = add(2, 3)
        read = bare_read(4)
    results: list[object] = [value, read]
    assert results == [5, 6]
    assert not any(inspect.iscoroutine(r) for r in results)


def test_positional_arguments_are_logged_by_name(kit: AgentKit) -> None:
    with kit.transaction("t"):
        add(7, 8)
    intents = [r for r in kit.store.records() if r.kind == Kind.STEP_INTENT]
    assert intents[0].data["args"] == {"x": 7, "y": 8}


def test_idempotency_key_is_deterministic_and_handed_over(kit: AgentKit) -> None:
    with kit.transaction("t") as saga:
        add(1, 1)
        add(1, 1)
    expected = [idempotency_key(saga.id, 1, "tests.add"), idempotency_key(saga.id, 2, "tests.add")]
    assert [e.key for e in LEDGER.events()[-2:]] == expected
    assert len(set(expected)) == 2
    assert idempotency_key(saga.id, 1, "tests.add") == expected[0]
    logged = [r.data["idempotency_key"] for r in kit.store.records() if r.kind == "step.intent"]
    assert logged == expected


def test_compensator_receives_derived_key(kit: AgentKit) -> None:
    with pytest.raises(SagaRolledBack), kit.transaction("t") as saga:
        add(1, 2)
        raise ValueError("later step failed")
    step_key = idempotency_key(saga.id, 1, "tests.add")
    assert LEDGER.count("undo_add", f"{step_key}/compensate") == 1


def test_async_context_manager_and_async_tool(kit: AgentKit) -> None:
    async def main() -> int:
        async with kit.transaction("async") as saga:
            assert current_saga() is saga
            return await async_add(2, 2)

    assert asyncio.run(main()) == 4
    assert kinds(kit)[-1] == Kind.SAGA_END


def test_async_rollback_awaits_async_compensator(kit: AgentKit) -> None:
    undone: list[int] = []

    async def undo(result: int) -> None:
        await asyncio.sleep(0)
        undone.append(result)

    @kit.tool(compensate=undo, name="tests.async_step")
    async def step(n: int) -> int:
        return n

    async def main() -> None:
        async with kit.transaction("async"):
            await step(1)
            await step(2)
            raise RuntimeError("fail")

    with pytest.raises(SagaRolledBack) as info:
        asyncio.run(main())
    assert undone == [2, 1]
    assert isinstance(info.value.cause, RuntimeError)


def test_sync_rollback_runs_async_compensator(kit: AgentKit) -> None:
    undone: list[int] = []

    async def undo(result: int) -> None:
        undone.append(result)

    @kit.tool(compensate=undo, name="tests.sync_step_async_undo")
    def step(n: int) -> int:
        return n

    with pytest.raises(SagaRolledBack), kit.transaction("t"):
        step(5)
        raise RuntimeError("fail")
    assert undone == [5]


def test_saga_scope_all_forms(home: Path) -> None:
    with AgentKit(home=home) as kit, use_kit(kit):

        @saga_scope
        def bare() -> str | None:
            saga = current_saga()
            return saga.name if saga else None

        @saga_scope()
        def empty_parens() -> bool:
            return current_saga() is not None

        @saga_scope("named")
        async def named_async() -> str | None:
            saga = current_saga()
            return saga.name if saga else None

        with saga_scope("ctx") as saga:
            assert current_saga() is saga

        async def use_async_with() -> str:
            async with saga_scope("actx") as s:
                return s.name

        assert str(bare()).endswith("bare")
        assert empty_parens() is True
        assert asyncio.run(named_async()) == "named"
        assert asyncio.run(use_async_with()) == "actx"
        assert current_saga() is None
        names = [r.data["name"] for r in kit.store.records() if r.kind == Kind.SAGA_BEGIN]
        assert names[-2:] == ["named", "actx"]


def test_kit_transaction_as_decorator(kit: AgentKit) -> None:
    @kit.transaction
    def job(n: int) -> int:
        return add(n, n)

    @kit.transaction("named-job")
    async def ajob(n: int) -> int:
        return await async_add(n, n)

    assert job(3) == 6
    assert asyncio.run(ajob(2)) == 4
    ends = [r.data["status"] for r in kit.store.records() if r.kind == Kind.SAGA_END]
    assert ends == ["committed", "committed"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"compensate": {"name": "payments.refund"}}, "compensate= must be"),
        ({"compensate": ["x"]}, "compensate= must be"),
        ({"compensate": ""}, "non-empty"),
        ({"semantics": "compensable"}, "needs compensate="),
        ({"semantics": "maybe"}, "semantics must be one of"),
        ({"semantics": "irreversible", "compensate": "x.y"}, "cannot be compensated"),
    ],
)
def test_bad_declarations_fail_at_declaration(kwargs: dict[str, Any], message: str) -> None:
    def charge(amount: int) -> None: ...

    with pytest.raises(ConfigurationError, match=message):
        tool(charge, **kwargs)


def test_callable_compensation_that_cannot_be_called_is_rejected() -> None:
    def refund(charge_id: str) -> None: ...

    def charge(amount: int) -> None: ...

    with pytest.raises(ConfigurationError, match="requires 'charge_id'"):
        tool(charge, compensate=refund)


def test_compensator_name_clash_is_an_error() -> None:
    def other(result: int) -> None: ...

    with pytest.raises(ConfigurationError, match="already registered"):
        compensator("tests.forms.undo_add", other)
    # Re-registering the same function is harmless (module reloads).
    compensator("tests.forms.undo_add", undo_add)
