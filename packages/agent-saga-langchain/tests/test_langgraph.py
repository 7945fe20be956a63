"""LangGraph and langchain 1.x agents (create_agent, create_react_agent, ToolNode, retries,
interrupts, checkpointers), driven offline by a scripted chat model, inside transactions."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

import pytest
from agent_saga import (
    AgentKit,
    ApprovalRequest,
    Approvals,
    CompensatorRegistry,
    SagaRolledBack,
    SequentialIds,
    action_digest,
    submit_vote,
)
from agent_saga.testing import Ledger
from agent_saga_langchain import (
    THREAD_SAGA_KEY,
    invoke_in_saga,
    saga_of_thread,
    saga_tool,
    saga_tools,
    thread_config,
)
from agent_saga_langchain.testing import ScriptedChat, call
from langchain.agents import create_agent
from langchain.agents.middleware import ToolRetryMiddleware
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import InjectedToolArg, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import (
    InjectedState,
    InjectedStore,
    ToolNode,
    ToolRuntime,
    create_react_agent,
)
from langgraph.store.memory import InMemoryStore
from langgraph.types import Command, RetryPolicy, interrupt

# create_react_agent is deprecated in LangGraph 1.x in favour of langchain's create_agent; its
# users still call it, so it is tested as they do.
pytestmark = pytest.mark.filterwarnings("ignore:create_react_agent has been moved")


def records(kit: AgentKit, kind: str) -> list[dict[str, Any]]:
    return [r.data for r in kit.store.records() if r.kind == kind]


def last_status(kit: AgentKit) -> str:
    return str(records(kit, "saga.end")[-1]["status"])


def tool_messages(messages: list[BaseMessage]) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage)]


# -- 1. the model's mistakes are not failures ---------------------------------------------------


def test_a_mistyped_call_reaches_the_model_and_the_corrected_call_commits(kit: AgentKit) -> None:
    ledger = Ledger()

    @tool
    def book(seat: int) -> str:
        """Book a seat by number."""
        ledger.record(f"book {seat}")
        return f"seat {seat}"

    tools = saga_tools([book], {"book": {"compensate": lambda: ledger.record("cancel")}})
    model = ScriptedChat(
        script=[
            AIMessage("", tool_calls=[call("book", {"seat": "the window one"}, "c1")]),
            AIMessage("", tool_calls=[call("book", {"seat": 12}, "c2")]),
            AIMessage("Seat 12 is yours."),
        ]
    )
    agent = create_agent(model, tools)
    out = invoke_in_saga(agent, {"messages": [HumanMessage("a window seat")]}, kit=kit)
    first, second = tool_messages(out["messages"])
    assert first.status == "error"
    assert "seat" in str(first.content)  # LangGraph's own validation message
    assert second.content == "seat 12"
    assert ledger.actions() == ["book 12"]
    assert [d["args"] for d in records(kit, "step.intent")] == [{"seat": 12}]
    assert records(kit, "step.failed") == []
    assert last_status(kit) == "committed"


# -- 2. retries --------------------------------------------------------------------------------


def test_tool_retry_middleware_retries_an_idempotent_tool_as_the_same_step(kit: AgentKit) -> None:
    ledger = Ledger()
    keys: list[str] = []

    @tool
    def book(seat: int, idempotency_key: Annotated[str | None, InjectedToolArg] = None) -> str:
        """Book a seat (the airline deduplicates by key)."""
        assert idempotency_key is not None
        keys.append(idempotency_key)
        if len(keys) == 1:
            raise ConnectionError("airline timed out")
        ledger.record(f"book {seat}")
        return "booked"

    wrapped = saga_tool(book, compensate=lambda: ledger.record("cancel"))
    assert wrapped.guard.idempotent  # it takes idempotency_key
    model = ScriptedChat(
        script=[
            AIMessage("", tool_calls=[call("book", {"seat": 3}, "c1")]),
            AIMessage("Booked."),
        ]
    )
    retry = ToolRetryMiddleware(max_retries=2, initial_delay=0, jitter=False)
    agent = create_agent(model, [wrapped], middleware=[retry])
    invoke_in_saga(agent, {"messages": [HumanMessage("seat 3")]}, kit=kit)
    assert ledger.actions() == ["book 3"]
    assert len(keys) == 2
    assert keys[0] == keys[1]  # the retry is the same step, with the same key
    assert len(records(kit, "step.intent")) == 1
    assert [d.get("retryable") for d in records(kit, "step.failed")] == [True]
    assert [d["ordinal"] for d in records(kit, "step.done")] == [1]
    assert last_status(kit) == "committed"


def test_an_idempotent_tool_that_is_never_retried_still_rolls_back(kit: AgentKit) -> None:
    ledger = Ledger()

    @tool
    def book(seat: int) -> str:
        """Book a seat."""
        raise ConnectionError("airline timed out")

    @tool
    def pay(amount: int) -> str:
        """Pay."""
        ledger.record("pay")
        return "paid"

    tools = saga_tools(
        [pay, book],
        {
            "pay": {"compensate": lambda: ledger.record("refund")},
            "book": {"semantics": "reversible", "idempotent": True},
        },
    )
    model = ScriptedChat(
        script=[
            AIMessage("", tool_calls=[call("pay", {"amount": 5}, "c1")]),
            AIMessage("", tool_calls=[call("book", {"seat": 3}, "c2")]),
            AIMessage("Could not book."),
        ]
    )
    agent = create_react_agent(model, ToolNode(tools, handle_tool_errors=True))
    with pytest.raises(SagaRolledBack) as raised:
        invoke_in_saga(agent, {"messages": [HumanMessage("seat 3")]}, kit=kit)
    assert isinstance(raised.value.cause, ConnectionError)
    assert ledger.actions() == ["pay", "refund"]


class Airline:
    """Books seats; a booking lands and then the reply times out (the worst case for retries)."""

    def __init__(self) -> None:
        self.booked: list[str] = []
        self.cancelled: list[str] = []

    def tools(self, registry: CompensatorRegistry) -> list[Any]:
        airline = self

        @tool
        def book_seat(seat: str) -> str:
            """Book a seat."""
            airline.booked.append(seat)
            raise TimeoutError("no reply from the airline")

        def cancel(seat: str) -> None:
            airline.cancelled.append(seat)

        def landed(seat: str) -> bool:
            return seat in airline.booked

        registry.register("airline.cancel", cancel)
        registry.register_probe("book_seat", landed)  # the kit's registry, not the default one
        return saga_tools([book_seat], {"book_seat": {"compensate": "airline.cancel"}})


def retrying_graph(model: ScriptedChat, tools: list[Any]) -> Any:
    """A hand-built LangGraph agent whose tool node a ``RetryPolicy`` re-runs on a timeout."""

    def agent_node(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    def route(state: MessagesState) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent_node)
    builder.add_node(
        "tools",
        ToolNode(tools, handle_tool_errors=False),
        retry_policy=RetryPolicy(
            max_attempts=3, initial_interval=0, jitter=False, retry_on=TimeoutError
        ),
    )
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route)
    builder.add_edge("tools", "agent")
    return builder.compile()


def test_a_retry_policy_never_books_a_seat_twice(tmp_path: Path) -> None:
    airline = Airline()
    registry = CompensatorRegistry()
    tools = airline.tools(registry)
    model = ScriptedChat(
        script=[
            AIMessage("", tool_calls=[call("book_seat", {"seat": "12A"}, "c1")]),
            AIMessage("I could not book it."),
        ]
    )
    graph = retrying_graph(model, tools)
    with AgentKit(home=tmp_path / "h", registry=registry, ids=SequentialIds()) as kit:
        with pytest.raises(SagaRolledBack) as raised:
            invoke_in_saga(graph, {"messages": [HumanMessage("seat 12A")]}, kit=kit)
        refused = records(kit, "gate.refused")
    assert isinstance(raised.value.cause, TimeoutError)
    assert airline.booked == ["12A"]  # the retry was refused: never a second booking
    assert [r["rule"] for r in refused] == ["saga_failed"]
    assert airline.cancelled == ["12A"]  # the probe said it landed: compensated
    assert raised.value.report.compensated[0].tool == "book_seat"


def test_a_retry_policy_retries_an_idempotent_tool_as_the_same_step(kit: AgentKit) -> None:
    airline: dict[str, str] = {}  # booking by idempotency key: a retry books nothing twice
    keys: list[str] = []

    @tool
    def book_seat(seat: str, idempotency_key: Annotated[str, InjectedToolArg] = "") -> str:
        """Book a seat."""
        keys.append(idempotency_key)
        airline.setdefault(idempotency_key, seat)
        if len(keys) == 1:
            raise TimeoutError("no reply from the airline")
        return f"booked {seat}"

    def cancel(idempotency_key: str) -> None:
        airline.pop(idempotency_key, None)

    tools = saga_tools([book_seat], {"book_seat": {"compensate": cancel}})
    model = ScriptedChat(
        script=[
            AIMessage("", tool_calls=[call("book_seat", {"seat": "12A"}, "c1")]),
            AIMessage("Booked 12A."),
        ]
    )
    out = invoke_in_saga(retrying_graph(model, tools), {"messages": [HumanMessage("12A")]}, kit=kit)
    assert out["messages"][-1].content == "Booked 12A."
    assert len(keys) == 2
    assert keys[0] == keys[1] != ""
    assert list(airline.values()) == ["12A"]
    assert len(records(kit, "step.intent")) == 1
    assert [d.get("retryable") for d in records(kit, "step.failed")] == [True]
    assert records(kit, "gate.refused") == []
    assert last_status(kit) == "committed"


# -- 3. interrupt() is a pause ----------------------------------------------------------------


def wire_tools(ledger: Ledger, registry: CompensatorRegistry) -> list[Any]:
    @tool
    def charge(amount: int) -> str:
        """Charge the card."""
        ledger.record(f"charge {amount}")
        return "ch_1"

    @tool
    def wire(amount: int) -> str:
        """Wire money once a human agrees."""
        answer = interrupt({"question": f"wire {amount}?"})
        if answer != "yes":
            return "not approved"
        ledger.record(f"wire {amount}")
        return "wired"

    @tool
    def notify(to: str) -> str:
        """Tell someone."""
        raise ConnectionError("mail server down")

    registry.register("refund", lambda result: ledger.record(f"refund {result}"))
    registry.register("recall", lambda result: ledger.record(f"recall {result}"))
    return saga_tools(
        [charge, wire, notify],
        {
            "charge": {"compensate": "refund"},
            "wire": {"compensate": "recall"},
            "notify": {"semantics": "reversible"},
        },
    )


def test_an_interrupt_is_a_pause_and_the_effect_runs_once_on_resume(tmp_path: Path) -> None:
    ledger = Ledger()
    registry = CompensatorRegistry()
    model = ScriptedChat(
        script=[
            AIMessage("", tool_calls=[call("wire", {"amount": 9}, "w1")]),
            AIMessage("Wired."),
        ]
    )
    agent = create_agent(model, wire_tools(ledger, registry), checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "t1"}}
    with AgentKit(home=tmp_path / "h", registry=registry) as kit:
        with kit.transaction("wire") as saga:
            first = agent.invoke(
                {"messages": [HumanMessage("wire 9")]}, thread_config(saga.id, config)
            )
            assert first["__interrupt__"][0].value == {"question": "wire 9?"}
            assert ledger.actions() == []
            done = agent.invoke(Command(resume="yes"), thread_config(saga.id, config))
        assert done["messages"][-1].content == "Wired."
        assert ledger.actions() == ["wire 9"]
        assert len(records(kit, "step.intent")) == 1
        assert len(records(kit, "step.done")) == 1
        assert records(kit, "step.failed") == []
        assert last_status(kit) == "committed"


# -- 4. a saga that spans requests (checkpointer) ----------------------------------------------


def test_a_suspended_saga_resumes_in_a_later_request_and_rolls_back_both(tmp_path: Path) -> None:
    ledger = Ledger()
    registry = CompensatorRegistry()
    tools = wire_tools(ledger, registry)
    model = ScriptedChat(
        script=[
            AIMessage("", tool_calls=[call("charge", {"amount": 9}, "c1")]),
            AIMessage("", tool_calls=[call("wire", {"amount": 9}, "w1")]),
            AIMessage("", tool_calls=[call("notify", {"to": "ann"}, "n1")]),
            AIMessage("Wired, but nobody was told."),
        ]
    )
    saver = InMemorySaver()  # stands for a checkpointer both requests reach (a database)
    agent = create_agent(model, tools, checkpointer=saver)
    thread: Any = {"configurable": {"thread_id": "order-7"}}
    home = tmp_path / "h"

    # Request 1: the charge commits, the wire waits for a human; the saga is suspended.
    with AgentKit(home=home, registry=registry) as first:
        with first.transaction("order") as saga:
            out = agent.invoke(
                {"messages": [HumanMessage("wire 9")]}, thread_config(saga.id, thread)
            )
            assert "__interrupt__" in out
            saga.suspend()
        saga_id = saga.id
    assert saga_of_thread(agent, thread) == saga_id
    assert ledger.actions() == ["charge 9"]

    # Request 2, another kit (another process's owner): the human said yes; the wire runs once
    # as the step it paused, the notification fails, and the first request's charge is
    # compensated too, newest first.
    with AgentKit(home=home, registry=registry) as second:
        resume = second.transaction(resume=saga_of_thread(agent, thread))
        with pytest.raises(SagaRolledBack) as raised, resume as resumed:
            assert resumed.id == saga_id
            agent.invoke(Command(resume="yes"), thread_config(saga_id, thread))
        assert ledger.actions() == ["charge 9", "wire 9", "recall wired", "refund ch_1"]
        assert [r.ordinal for r in raised.value.report.compensated] == [2, 1]
        kinds = [r.kind for r in second.store.records() if r.saga == saga_id]
        assert kinds.count("saga.suspended") == 1
        assert kinds.count("saga.resumed") == 1
        assert kinds.count("step.intent") == 3
        assert second.verify().ok
    assert THREAD_SAGA_KEY == "agent_saga_id"


# -- 5. injected arguments ---------------------------------------------------------------------


def test_injected_arguments_are_neither_gated_nor_logged(kit: AgentKit) -> None:
    seen: dict[str, Any] = {}

    @tool
    def lookup(
        order: str,
        card: dict[str, str],
        runtime: ToolRuntime,
        state: Annotated[dict[str, Any], InjectedState],
        store: Annotated[Any, InjectedStore()],
    ) -> str:
        """Look an order up."""
        seen["messages"] = len(state["messages"])
        seen["store"] = store is runtime.store
        return f"order {order}"

    wrapped = saga_tool(lookup, semantics="reversible", redact=["card.cvv"])
    model = ScriptedChat(
        script=[
            AIMessage(
                "",
                tool_calls=[
                    call(
                        "lookup",
                        {"order": "o-1", "card": {"cvv": "cvv-secret-739", "no": "4"}},
                        "c1",
                    )
                ],
            ),
            AIMessage("Found it."),
        ]
    )
    agent = create_agent(model, [wrapped], store=InMemoryStore())
    out = invoke_in_saga(agent, {"messages": [HumanMessage("where is o-1")]}, kit=kit)
    assert tool_messages(out["messages"])[0].content == "order o-1"
    assert seen == {"messages": 2, "store": True}
    [intent] = records(kit, "step.intent")
    assert intent["args"] == {"order": "o-1", "card": {"cvv": {"$redacted": "write"}, "no": "4"}}
    assert "cvv-secret-739" not in "".join(str(r.data) for r in kit.store.records())
    assert last_status(kit) == "committed"


def test_an_injected_tool_arg_is_passed_on_but_never_logged(kit: AgentKit) -> None:
    got: list[str] = []

    @tool
    def fetch(order: str, api_key: Annotated[str, InjectedToolArg]) -> str:
        """Fetch an order from the shop's API."""
        got.append(api_key)
        return f"order {order}"

    wrapped = saga_tool(fetch, semantics="reversible")
    assert "api_key" not in wrapped.tool_call_schema.model_json_schema()["properties"]  # type: ignore[union-attr]
    with kit.transaction():  # an application's own loop adds the key to the model's call
        message = wrapped.invoke(call("fetch", {"order": "o-1", "api_key": "sk-secret"}, "c1"))
    assert message.content == "order o-1"
    assert got == ["sk-secret"]
    [intent] = records(kit, "step.intent")
    assert intent["args"] == {"order": "o-1"}
    assert "sk-secret" not in "".join(str(r.data) for r in kit.store.records())


class ApproveWhenPosted:
    """An agent-saga approval channel whose approver says yes as soon as a request is posted."""

    def __init__(self) -> None:
        self.kit: AgentKit | None = None
        self.requests: list[ApprovalRequest] = []

    def request_posted(self, request: ApprovalRequest) -> None:
        assert self.kit is not None
        self.requests.append(request)
        submit_vote(self.kit.store, request.id, "unix:alice", "approve", channel="test")

    def request_decided(self, request: ApprovalRequest, decision: str) -> None:
        pass


def test_an_approval_is_bound_to_the_models_arguments_only(tmp_path: Path) -> None:
    sent: list[str] = []

    @tool
    def transfer(
        amount: int, to: str, runtime: ToolRuntime, state: Annotated[dict[str, Any], InjectedState]
    ) -> str:
        """Transfer money (cannot be undone)."""
        sent.append(f"{amount} to {to} after {len(state['messages'])} messages")
        return "sent"

    wrapped = saga_tool(transfer, semantics="irreversible")
    model = ScriptedChat(
        script=[
            AIMessage("", tool_calls=[call("transfer", {"amount": 5, "to": "bob"}, "t1")]),
            AIMessage("Sent."),
        ]
    )
    channel = ApproveWhenPosted()
    approvals = Approvals(approvers=["unix:alice"], channels=[channel], poll=0.01)
    with AgentKit(home=tmp_path / "h", approvals=approvals) as kit:
        channel.kit = kit
        out = invoke_in_saga(
            create_agent(model, [wrapped]), {"messages": [HumanMessage("pay")]}, kit=kit
        )
        assert last_status(kit) == "committed"
    assert out["messages"][-1].content == "Sent."
    assert sent == ["5 to bob after 2 messages"]
    [request] = channel.requests
    assert request.args == {"amount": 5, "to": "bob"}
    assert request.digest == action_digest("transfer", "irreversible", {"amount": 5, "to": "bob"})


# -- 6. one result type ---------------------------------------------------------------------------


def test_the_compensator_gets_the_tools_own_value_on_every_path(kit: AgentKit) -> None:
    got: list[Any] = []

    @tool
    def reserve(room: str) -> dict[str, str]:
        """Reserve a room."""
        return {"reservation": "r-1", "room": room}

    @tool
    def fail() -> str:
        """Always fails."""
        raise RuntimeError("no")

    tools = saga_tools(
        [reserve, fail],
        {
            "reserve": {"compensate": lambda result: got.append(result)},  # noqa: PLW0108
            "fail": {"semantics": "reversible"},
        },
    )
    model = ScriptedChat(
        script=[
            AIMessage("", tool_calls=[call("reserve", {"room": "7"}, "c1")]),
            AIMessage("", tool_calls=[call("fail", {}, "c2")]),
            AIMessage("?"),
        ]
    )
    agent = create_react_agent(model, ToolNode(tools, handle_tool_errors=True))
    with pytest.raises(SagaRolledBack):
        invoke_in_saga(agent, {"messages": [HumanMessage("go")]}, kit=kit)
    with pytest.raises(SagaRolledBack), kit.transaction():
        tools[0].invoke({"room": "8"})
        tools[1].invoke({})
    assert got == [{"reservation": "r-1", "room": "7"}, {"reservation": "r-1", "room": "8"}]
    assert [d["result"] for d in records(kit, "step.done")] == [
        {"reservation": "r-1", "room": "7"},
        {"reservation": "r-1", "room": "8"},
    ]


# -- 7. every entry point ----------------------------------------------------------------------


def test_run_and_arun_work_like_invoke(kit: AgentKit) -> None:
    ledger = Ledger()

    @tool
    def charge(amount: int) -> str:
        """Charge."""
        ledger.record(f"charge {amount}")
        return "ch"

    wrapped = saga_tool(charge, compensate=lambda: ledger.record("refund"))
    with kit.transaction():
        assert wrapped.run({"amount": 1}) == "ch"
        assert wrapped.run("2") == "ch"  # a single-input tool also takes a plain string

    async def both() -> Any:
        async with kit.transaction():
            return await wrapped.arun({"amount": 3})

    assert asyncio.run(both()) == "ch"
    assert ledger.actions() == ["charge 1", "charge 2", "charge 3"]
    assert [d["args"] for d in records(kit, "step.intent")] == [
        {"amount": 1},
        {"amount": "2"},
        {"amount": 3},
    ]


# -- 8. a run that outlives its transaction ------------------------------------------------------


def test_a_step_after_the_transaction_ended_is_refused(kit: AgentKit) -> None:
    ledger = Ledger()

    @tool
    def charge(amount: int) -> str:
        """Charge."""
        ledger.record(f"charge {amount}")
        return "ch"

    wrapped = saga_tool(charge, compensate=lambda: ledger.record("refund"))
    model = ScriptedChat(
        script=[AIMessage("", tool_calls=[call("charge", {"amount": 4}, "c1")]), AIMessage("ok")]
    )
    agent = create_react_agent(model, ToolNode([wrapped], handle_tool_errors=True))

    async def main() -> Any:
        gate = asyncio.Event()

        async def later() -> Any:
            await gate.wait()  # the request handler has returned meanwhile
            return await agent.ainvoke({"messages": [HumanMessage("charge 4")]})

        async with kit.transaction("request"):
            task = asyncio.create_task(later())  # started inside, runs on after the end
        gate.set()
        return await task

    out = asyncio.run(main())
    [message] = tool_messages(out["messages"])
    assert message.status == "error"
    assert "has ended" in str(message.content)
    assert ledger.actions() == []
    kinds = [r.kind for r in kit.store.records()]
    assert kinds == ["saga.begin", "saga.end"]


# -- 10. create_react_agent with ToolNode, handle_tool_errors off --------------------------------


def test_create_react_agent_without_error_handling_rolls_back(tmp_path: Path) -> None:
    ledger = Ledger()
    registry = CompensatorRegistry()
    tools = wire_tools(ledger, registry)

    model = ScriptedChat(
        script=[
            AIMessage("", tool_calls=[call("charge", {"amount": 2}, "c1")]),
            AIMessage("", tool_calls=[call("notify", {"to": "ann"}, "n1")]),
        ]
    )
    agent = create_react_agent(model, ToolNode(tools, handle_tool_errors=False))
    with (
        AgentKit(home=tmp_path / "h", registry=registry) as kit,
        pytest.raises(SagaRolledBack) as raised,
    ):
        invoke_in_saga(agent, {"messages": [HumanMessage("go")]}, kit=kit)
    assert isinstance(raised.value.cause, ConnectionError)
    assert ledger.actions() == ["charge 2", "refund ch_1"]
