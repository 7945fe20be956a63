"""FunctionAgent and ReActAgent, driven by a scripted LLM, inside a transaction.

No ``from __future__ import annotations`` here: LlamaIndex finds a tool's ``ctx: Context``
parameter by its evaluated annotation.
"""

import asyncio
from typing import Any

import pytest
from agent_saga import AgentKit, DenyTools, SagaRolledBack, SequentialIds
from agent_saga.testing import Ledger
from agent_saga_llamaindex import SagaToolProxy, run_agent, saga_tool, saga_tools
from agent_saga_llamaindex.testing import Script, answer, tool_call
from llama_index.core.agent.workflow import FunctionAgent, ReActAgent
from llama_index.core.tools import BaseTool, FunctionTool
from llama_index.core.workflow import Context, HumanResponseEvent, InputRequiredEvent

# Warnings the frameworks raise about themselves: llama-index-workflows lists an agent's steps
# with inspect.getmembers, which reads pydantic's deprecated attributes (pydantic warns from
# inside ``inspect``), and ReActAgent asks the workflow whether it is running.
pytestmark = [
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecationWarning:inspect"),
    pytest.mark.filterwarnings("ignore:is_running called from within a step:DeprecationWarning"),
]


class Travel:
    """charge and book can be undone; notify fails."""

    def __init__(self) -> None:
        self.ledger = ledger = Ledger()

        def charge(amount: int, card: str) -> str:
            """Charge the card."""
            ledger.record("charge")
            return "ch_1"

        async def book(hotel: str) -> str:
            """Book a room."""
            ledger.record("book")
            return "bk_1"

        def notify(to: str) -> str:
            """Send the confirmation."""
            ledger.record("notify")
            raise ConnectionError("mail server down")

        def refund(result: str, amount: int) -> None:
            assert result == "ch_1"
            ledger.record("refund")

        def cancel(result: str) -> None:
            ledger.record("cancel")

        self.raw: list[BaseTool] = [
            FunctionTool.from_defaults(charge),
            FunctionTool.from_defaults(async_fn=book),
            FunctionTool.from_defaults(notify),
        ]
        self.tools = saga_tools(
            self.raw,
            {
                "charge": {"compensate": refund},
                "book": {"compensate": cancel},
                "notify": {"semantics": "reversible"},
            },
        )


def travel_script() -> Script:
    return Script(
        [
            tool_call("charge", "c1", amount=120, card="visa"),
            tool_call("book", "c2", hotel="Ritz"),
            tool_call("notify", "c3", to="ann"),
            answer("Booked, but the confirmation could not be sent."),
        ]
    )


def tool_results(script: Script) -> list[str]:
    return [m.content or "" for call in script.seen[-1:] for m in call if m.role == "tool"]


def test_function_agent_failure_rolls_back_in_reverse(kit: AgentKit) -> None:
    travel = Travel()
    script = travel_script()
    agent = FunctionAgent(tools=[*travel.tools], llm=script.llm())

    with pytest.raises(SagaRolledBack) as raised:
        asyncio.run(run_agent(agent, user_msg="book the Ritz", kit=kit, name="trip"))
    assert travel.ledger.actions() == ["charge", "book", "notify", "cancel", "refund"]
    assert isinstance(raised.value.cause, ConnectionError)
    assert tool_results(script)[-1] == "mail server down"
    assert kit.verify().ok
    kinds = [r.kind for r in kit.store.records()]
    assert kinds.count("step.failed") == 1
    assert kinds.count("compensation.done") == 2


def test_react_agent_failure_rolls_back(kit: AgentKit) -> None:
    travel = Travel()
    script = Script(
        [
            answer('Thought: pay.\nAction: charge\nAction Input: {"amount": 120, "card": "v"}'),
            answer('Thought: book.\nAction: book\nAction Input: {"hotel": "Ritz"}'),
            answer('Thought: tell.\nAction: notify\nAction Input: {"to": "ann"}'),
            answer("Thought: I can answer without using any more tools.\nAnswer: partly done"),
        ]
    )
    agent = ReActAgent(tools=[*travel.tools], llm=script.llm())
    with pytest.raises(SagaRolledBack) as raised:
        asyncio.run(run_agent(agent, user_msg="book", kit=kit))
    assert isinstance(raised.value.cause, ConnectionError), repr(raised.value.cause)
    assert travel.ledger.actions() == ["charge", "book", "notify", "cancel", "refund"]
    seen = "\n".join(str(m.content) for m in script.seen[-1])
    assert "mail server down" in seen


def test_a_refusal_is_the_tool_error_output_and_the_body_never_runs(tmp_path: Any) -> None:
    travel = Travel()
    script = Script(
        [
            tool_call("charge", "c1", amount=5, card="v"),
            tool_call("book", "c2", hotel="Ritz"),
            answer("I could not book."),
        ]
    )
    agent = FunctionAgent(tools=[*travel.tools], llm=script.llm())
    rules = [DenyTools(frozenset({"book"}))]
    with AgentKit(home=tmp_path / "h", rules=rules, ids=SequentialIds()) as kit:
        result = asyncio.run(run_agent(agent, user_msg="go", kit=kit))
        assert "could not book" in str(result)
        assert "deny list" in tool_results(script)[-1]
        assert travel.ledger.actions() == ["charge"]
        records = list(kit.store.records())
        assert [r.data["rule"] for r in records if r.kind == "gate.refused"] == ["deny_tools"]
        assert records[-1].data["status"] == "committed"


def test_a_context_tool_keeps_its_context(kit: AgentKit) -> None:
    seen: list[object] = []

    async def remember(ctx: Context, note: str) -> str:
        """Store a note in the run's state."""
        await ctx.store.set("note", note)
        seen.append(await ctx.store.get("note"))
        return "stored"

    wrapped = saga_tool(FunctionTool.from_defaults(async_fn=remember), semantics="reversible")
    assert isinstance(wrapped, FunctionTool)
    assert wrapped.requires_context
    script = Script([tool_call("remember", "c1", note="hi"), answer("ok")])
    agent = FunctionAgent(tools=[wrapped], llm=script.llm())
    asyncio.run(run_agent(agent, user_msg="note", kit=kit))
    assert seen == ["hi"]
    done = [r for r in kit.store.records() if r.kind == "step.done"]
    assert [(r.data["tool"], r.data["result"]) for r in done] == [("remember", "stored")]
    intent = next(r for r in kit.store.records() if r.kind == "step.intent")
    assert intent.data["args"] == {"note": "hi"}


def test_a_human_wait_is_no_failure_and_the_effect_runs_once(kit: AgentKit) -> None:
    ledger = Ledger()
    keys: list[str] = []

    async def wire(ctx: Context, amount: int) -> str:
        """Wire money once a human agrees."""
        keys.append("called")
        reply = await ctx.wait_for_event(
            HumanResponseEvent,
            waiter_event=InputRequiredEvent(prefix=f"wire {amount}?"),  # type: ignore[call-arg]  # events take any field
        )
        if reply.response != "yes":
            return "not approved"
        ledger.record("wire")
        return "wired"

    tool = saga_tool(
        FunctionTool.from_defaults(async_fn=wire),
        compensate=lambda: ledger.record("recall"),
    )
    script = Script([tool_call("wire", "c1", amount=9), answer("done")])
    agent = FunctionAgent(tools=[tool], llm=script.llm())

    async def main() -> str:
        async with kit.transaction("wire"):
            handler = agent.run(user_msg="wire 9")
            async for event in handler.stream_events():
                if isinstance(event, InputRequiredEvent):
                    assert handler.ctx is not None
                    yes = HumanResponseEvent(response="yes")  # type: ignore[call-arg]
                    handler.ctx.send_event(yes)
            return str(await handler)

    assert asyncio.run(main()) == "done"
    assert keys == ["called", "called"]  # the workflow ran the tool twice ...
    assert ledger.actions() == ["wire"]  # ... its effect ran once
    kinds = [r.kind for r in kit.store.records()]
    assert kinds.count("step.intent") == 1
    assert kinds.count("step.done") == 1
    assert "step.failed" not in kinds
    assert list(kit.store.records())[-1].data["status"] == "committed"


def test_outside_a_transaction_tools_run_untouched(kit: AgentKit) -> None:
    travel = Travel()
    charge, book = travel.tools[0], travel.tools[1]
    assert isinstance(charge, FunctionTool)
    assert isinstance(book, FunctionTool)
    out = charge.call(amount=1, card="v")
    assert out.raw_output == "ch_1"
    out = asyncio.run(book.acall(hotel="x"))
    assert out.raw_output == "bk_1"
    assert list(kit.store.records()) == []


def test_metadata_is_unchanged() -> None:
    travel = Travel()
    for raw, wrapped in zip(travel.raw, travel.tools, strict=True):
        assert wrapped.metadata is raw.metadata
        assert wrapped.metadata.to_openai_tool() == raw.metadata.to_openai_tool()


class Lookup(BaseTool):
    """A tool that is not a FunctionTool: it is wrapped by a proxy."""

    def __init__(self, fail: bool) -> None:
        from llama_index.core.tools import ToolMetadata

        self.fail = fail
        self._metadata = ToolMetadata(name="lookup", description="Look a thing up.")

    @property
    def metadata(self) -> Any:
        return self._metadata

    def __call__(self, input: Any) -> Any:
        from llama_index.core.tools import ToolOutput

        if self.fail:
            return ToolOutput(
                content="lookup failed",
                tool_name="lookup",
                raw_input={},
                raw_output=None,
                is_error=True,
            )
        return ToolOutput(
            content="found", tool_name="lookup", raw_input={}, raw_output={"found": input}
        )


def test_other_tools_are_proxied_and_an_error_output_is_a_failure(kit: AgentKit) -> None:
    got: list[Any] = []
    ok = saga_tool(Lookup(fail=False), compensate=lambda result: got.append(result))  # noqa: PLW0108
    bad = saga_tool(Lookup(fail=True), semantics="reversible")
    assert isinstance(ok, SagaToolProxy)
    with pytest.raises(SagaRolledBack) as raised, kit.transaction():
        assert ok.call(input="x").content == "found"
        assert bad.call(input="y").is_error
    assert str(raised.value.cause) == "lookup failed"
    # The compensator and the log get the tool's own value, not the text shown to the model.
    assert got == [{"found": "x"}]
    done = [r.data["result"] for r in kit.store.records() if r.kind == "step.done"]
    assert done == [{"found": "x"}]


def test_on_refusal_rollback_aborts_the_transaction(kit: AgentKit) -> None:
    travel = Travel()
    # "book" has no declaration: it is IRREVERSIBLE, and with no approval channel refused.
    tools = saga_tools(
        travel.raw[:2],
        {"charge": {"compensate": lambda: travel.ledger.record("refund")}},
        on_refusal="rollback",
    )
    script = Script(
        [
            tool_call("charge", "c1", amount=5, card="v"),
            tool_call("book", "c2", hotel="R"),
            answer("x"),
        ]
    )
    with pytest.raises(SagaRolledBack):
        asyncio.run(
            run_agent(FunctionAgent(tools=[*tools], llm=script.llm()), user_msg="go", kit=kit)
        )
    assert travel.ledger.actions() == ["charge", "refund"]
    assert "no approval channel" in tool_results(script)[-1]
