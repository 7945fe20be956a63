"""A langchain-core agent loop, driven by a scripted model, inside a transaction."""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import UUID

import pytest
from agent_saga import AgentKit, DenyTools, SagaRolledBack, SequentialIds
from agent_saga.testing import Ledger
from agent_saga_langchain import (
    SAGA_ID_KEY,
    SagaTool,
    ainvoke_in_saga,
    invoke_in_saga,
    saga_tool,
    saga_tools,
)
from agent_saga_langchain.testing import ScriptedChat, agent_loop, call
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import ensure_config
from langchain_core.tools import BaseTool, StructuredTool, ToolException, tool


class Travel:
    """Three tools on a ledger: charge and book can be undone; notify fails."""

    def __init__(self) -> None:
        self.ledger = Ledger()
        ledger = self.ledger
        self.book_metadata: dict[str, Any] = {}
        seen = self.book_metadata

        @tool
        def charge(amount: int, card: str) -> str:
            """Charge the card."""
            ledger.record("charge")
            return "ch_1"

        @tool
        def book(hotel: str) -> str:
            """Book a room."""
            ledger.record("book")
            seen.update(ensure_config().get("metadata") or {})
            return "bk_1"

        def send(to: str) -> str:
            ledger.record("notify")
            raise ToolException("mail server down")

        # LangChain itself turns the ToolException into an error message for the model.
        notify = StructuredTool.from_function(
            send, name="notify", description="Send the confirmation.", handle_tool_error=True
        )

        def refund(result: str, amount: int) -> None:
            assert result == "ch_1"
            ledger.record("refund")

        def cancel(result: str) -> None:
            ledger.record("cancel")

        self.raw: list[BaseTool] = [charge, book, notify]
        self.tools = saga_tools(
            self.raw,
            {
                "charge": {"compensate": refund},
                "book": {"compensate": cancel},
                "notify": {"semantics": "reversible"},
            },
        )


def script() -> list[AIMessage]:
    return [
        AIMessage("", tool_calls=[call("charge", {"amount": 120, "card": "visa"}, "c1")]),
        AIMessage("", tool_calls=[call("book", {"hotel": "Ritz"}, "c2")]),
        AIMessage("", tool_calls=[call("notify", {"to": "ann"}, "c3")]),
        AIMessage("Booked, but the confirmation could not be sent."),
    ]


class Recorder(BaseCallbackHandler):
    def __init__(self) -> None:
        self.tool_starts: list[tuple[str, dict[str, Any]]] = []
        self.tool_ends = 0
        self.tool_errors = 0
        self.model_metadata: list[dict[str, Any]] = []
        self.tags: list[list[str]] = []

    def on_tool_start(
        self, serialized: dict[str, Any], input_str: str, *, metadata: Any = None, **kw: Any
    ) -> None:
        self.tool_starts.append((serialized["name"], dict(metadata or {})))
        self.tags.append(list(kw.get("tags") or []))

    def on_tool_end(self, output: Any, **kw: Any) -> None:
        self.tool_ends += 1

    def on_tool_error(self, error: BaseException, **kw: Any) -> None:
        self.tool_errors += 1

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        metadata: Any = None,
        **kw: Any,
    ) -> None:
        self.model_metadata.append(dict(metadata or {}))


def test_sync_run_rolls_back_in_reverse_and_the_model_saw_the_error(kit: AgentKit) -> None:
    travel = Travel()
    model = ScriptedChat(script=script(), seen=[])
    recorder = Recorder()
    with pytest.raises(SagaRolledBack) as raised:
        invoke_in_saga(
            agent_loop(model, travel.tools),
            [HumanMessage("book the Ritz")],
            {"callbacks": [recorder]},
            kit=kit,
            name="trip",
        )
    assert travel.ledger.actions() == ["charge", "book", "notify", "cancel", "refund"]
    assert "mail server down" in str(raised.value.cause)
    last_tool_message = model.seen[-1][-1]
    assert isinstance(last_tool_message, ToolMessage)
    assert last_tool_message.status == "error"
    assert last_tool_message.content == "mail server down"
    assert kit.verify().ok
    kinds = [r.kind for r in kit.store.records()]
    assert kinds.count("step.done") == 2
    assert kinds.count("step.failed") == 1
    assert kinds.count("compensation.done") == 2
    # Callbacks fire once per tool call, and carry the saga id.
    assert [name for name, _ in recorder.tool_starts] == ["charge", "book", "notify"]
    assert recorder.tool_ends == 3
    saga_id = raised.value.saga_id
    assert all(meta[SAGA_ID_KEY] == saga_id for _, meta in recorder.tool_starts)
    assert all(f"saga:{saga_id}" in tags for tags in recorder.tags)
    # Runs a tool body starts see its step (the step begins after LangChain's validation).
    assert travel.book_metadata["saga_step"] == 2
    assert travel.book_metadata["idempotency_key"].startswith("as1-")
    assert recorder.model_metadata[0][SAGA_ID_KEY] == saga_id


def test_async_run_rolls_back_too(kit: AgentKit) -> None:
    travel = Travel()
    model = ScriptedChat(script=script(), seen=[])

    async def main() -> None:
        await ainvoke_in_saga(
            agent_loop(model, travel.tools), [HumanMessage("book")], kit=kit, name="trip"
        )

    with pytest.raises(SagaRolledBack):
        asyncio.run(main())
    assert travel.ledger.actions() == ["charge", "book", "notify", "cancel", "refund"]
    assert kit.verify().ok


def test_a_raising_tool_caught_by_the_loop_still_rolls_back(kit: AgentKit) -> None:
    ledger = Ledger()

    @tool
    def charge(amount: int) -> str:
        """Charge."""
        ledger.record("charge")
        return "ch"

    @tool
    def ship(item: str) -> str:
        """Ship."""
        raise RuntimeError("warehouse offline")

    tools = saga_tools(
        [charge, ship],
        {
            "charge": {"compensate": lambda: ledger.record("refund")},
            "ship": {"semantics": "reversible"},
        },
    )
    model = ScriptedChat(
        script=[
            AIMessage("", tool_calls=[call("charge", {"amount": 3}, "a")]),
            AIMessage("", tool_calls=[call("ship", {"item": "x"}, "b")]),
            AIMessage("sorry"),
        ],
        seen=[],
    )
    with pytest.raises(SagaRolledBack) as raised:
        invoke_in_saga(agent_loop(model, tools), [HumanMessage("go")], kit=kit)
    assert isinstance(raised.value.cause, RuntimeError)
    assert ledger.actions() == ["charge", "refund"]
    assert model.seen[-1][-1].content == "Error: warehouse offline"


def test_a_refusal_is_a_tool_message_and_the_body_never_runs(tmp_path: Any) -> None:
    travel = Travel()
    model = ScriptedChat(
        script=[
            AIMessage("", tool_calls=[call("charge", {"amount": 5, "card": "v"}, "c1")]),
            AIMessage("", tool_calls=[call("book", {"hotel": "Ritz"}, "c2")]),
            AIMessage("I could not book."),
        ],
        seen=[],
    )
    rules = [DenyTools(frozenset({"book"}))]
    with AgentKit(home=tmp_path / "h", rules=rules, ids=SequentialIds()) as kit:
        messages = invoke_in_saga(agent_loop(model, travel.tools), [HumanMessage("go")], kit=kit)
        refusal = messages[-2]
        assert isinstance(refusal, ToolMessage)
        assert refusal.status == "error"
        assert refusal.tool_call_id == "c2"
        assert "deny list" in str(refusal.content)
        assert model.seen[-1][-1] == refusal
        assert travel.ledger.actions() == ["charge"]
        records = list(kit.store.records())
        assert [r.data["rule"] for r in records if r.kind == "gate.refused"] == ["deny_tools"]
        assert records[-1].data["status"] == "committed"


def test_on_refusal_rollback_aborts_the_transaction(tmp_path: Any) -> None:
    travel = Travel()
    tools = saga_tools(
        travel.raw,
        {"charge": {"compensate": lambda: travel.ledger.record("refund")}},
        on_refusal="rollback",
    )
    model = ScriptedChat(
        script=[
            AIMessage("", tool_calls=[call("charge", {"amount": 5, "card": "v"}, "c1")]),
            AIMessage("", tool_calls=[call("book", {"hotel": "Ritz"}, "c2")]),
            AIMessage("done"),
        ],
        seen=[],
    )
    # "book" has no declaration: it is IRREVERSIBLE, and with no approval channel refused.
    with AgentKit(home=tmp_path / "h", ids=SequentialIds()) as kit, pytest.raises(SagaRolledBack):
        invoke_in_saga(agent_loop(model, tools), [HumanMessage("go")], kit=kit)
    assert travel.ledger.actions() == ["charge", "refund"]


def test_outside_a_transaction_tools_run_untouched(kit: AgentKit) -> None:
    travel = Travel()
    charge = travel.tools[0]
    assert charge.invoke({"amount": 1, "card": "v"}) == "ch_1"
    out = asyncio.run(charge.ainvoke({"amount": 1, "card": "v"}))
    assert out == "ch_1"
    assert travel.ledger.actions() == ["charge", "charge"]
    assert list(kit.store.records()) == []


def test_plain_argument_calls_work_sync_and_async(kit: AgentKit) -> None:
    travel = Travel()
    charge = travel.tools[0]

    async def both() -> tuple[Any, Any]:
        async with kit.transaction():
            first = await charge.ainvoke({"amount": 1, "card": "v"})
        with kit.transaction():
            second = charge.invoke({"amount": 2, "card": "v"})
        return first, second

    assert asyncio.run(both()) == ("ch_1", "ch_1")
    done = [r for r in kit.store.records() if r.kind == "step.done"]
    assert [r.data["result"] for r in done] == ["ch_1", "ch_1"]


def test_name_description_and_schema_are_unchanged() -> None:
    travel = Travel()
    for raw, wrapped in zip(travel.raw, travel.tools, strict=True):
        assert isinstance(wrapped, SagaTool)
        assert wrapped.name == raw.name
        assert wrapped.description == raw.description
        assert wrapped.args_schema is raw.args_schema
        assert wrapped.args == raw.args
        assert wrapped.tool_call_schema.model_json_schema() == (  # type: ignore[union-attr]
            raw.tool_call_schema.model_json_schema()  # type: ignore[union-attr]
        )


def test_declarations_for_unknown_tools_are_an_error() -> None:
    travel = Travel()
    with pytest.raises(ValueError, match="chrage"):
        saga_tools(travel.raw, {"chrage": {"semantics": "reversible"}})


class Search(BaseTool):
    """A BaseTool subclass with no args_schema: LangChain derives it from ``_run``."""

    name: str = "search"
    description: str = "Search the catalogue."

    def _run(self, query: str, limit: int = 3) -> str:
        return f"{limit} results for {query}"


def test_a_tool_without_args_schema_keeps_its_derived_schema(kit: AgentKit) -> None:
    raw = Search()
    wrapped = saga_tool(raw, semantics="reversible")
    assert wrapped.args == raw.args
    assert set(wrapped.args) == {"query", "limit"}
    assert wrapped.tool_call_schema.model_json_schema() == (  # type: ignore[union-attr]
        raw.tool_call_schema.model_json_schema()  # type: ignore[union-attr]
    )
    with kit.transaction():
        assert wrapped.invoke({"query": "lamp"}) == "3 results for lamp"
    intent = next(r for r in kit.store.records() if r.kind == "step.intent")
    assert intent.data["args"] == {"query": "lamp"}
