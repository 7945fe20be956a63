"""A LlamaIndex agent (scripted LLM) in a transaction: its own spans carry the saga id."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from agent_saga import AgentKit, SagaRolledBack, SequentialIds
from agent_saga_otel import SAGA_ID, OTelObserver
from agent_saga_otel.llamaindex import LlamaIndexLink
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ToolCallBlock
from llama_index.core.llms import ChatMessage, ChatResponse, LLMMetadata, MessageRole
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool
from llama_index_instrumentation import get_dispatcher
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

# The agent's workflow inspects its own members, which touches pydantic's deprecated fields.
pytestmark = pytest.mark.filterwarnings(
    "ignore::pydantic.warnings.PydanticDeprecationWarning:inspect"
)


@pytest.fixture
def link(provider: TracerProvider) -> Iterator[LlamaIndexLink]:
    made = LlamaIndexLink(provider)
    yield made
    made.uninstall()


class CountingLLM(MockFunctionCallingLLM):
    """A scripted model that reports its name and token counts, as hosted models' classes do."""

    def __init__(self, response_generator: Callable[..., ChatMessage]) -> None:
        super().__init__(response_generator=response_generator)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(is_function_calling_model=True, model_name="scripted-1")

    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        response: ChatResponse = await super().achat(messages, **kwargs)
        response.additional_kwargs = {"prompt_tokens": 12, "completion_tokens": 3}
        return response


def script(replies: Sequence[ChatMessage]) -> MockFunctionCallingLLM:
    pending = list(replies)

    def reply(messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        return pending.pop(0)

    return CountingLLM(response_generator=reply)


def tool_call(name: str, call_id: str, **kwargs: Any) -> ChatMessage:
    block = ToolCallBlock(tool_call_id=call_id, tool_name=name, tool_kwargs=kwargs)
    return ChatMessage(role=MessageRole.ASSISTANT, blocks=[block])


def test_agent_spans_carry_the_saga_id(
    tmp_path: Path,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
    link: LlamaIndexLink,
) -> None:
    assert link.handler not in get_dispatcher().span_handlers  # nothing until a saga starts
    with AgentKit(
        home=tmp_path / "home", ids=SequentialIds(), observers=[OTelObserver(provider), link]
    ) as kit:

        @kit.tool(name="hotel.book", compensate=lambda: None)
        async def book_hotel(city: str) -> str:
            return f"booked in {city}"

        async def book(city: str) -> str:
            """Book a hotel."""
            return await book_hotel(city=city)

        llm = script(
            [
                tool_call("book", "c1", city="Oslo"),
                ChatMessage(role=MessageRole.ASSISTANT, content="booked"),
            ]
        )
        agent = FunctionAgent(
            tools=[FunctionTool.from_defaults(async_fn=book)], llm=llm, streaming=False
        )

        async def run() -> None:
            async with kit.transaction("trip"):
                await agent.run(user_msg="book Oslo")
                raise RuntimeError("the user cancelled")

        with pytest.raises(SagaRolledBack):
            asyncio.run(run())
    spans = exporter.get_finished_spans()
    root = next(s for s in spans if s.name == "invoke_workflow trip")
    assert root.attributes is not None
    saga_id = root.attributes[SAGA_ID]
    llama = [s for s in spans if s.attributes and "llama_index.span.id" in s.attributes]
    names = {s.name for s in llama}
    assert "FunctionTool.acall" in names, sorted(names)
    assert any(name.startswith("CountingLLM.") for name in names), sorted(names)
    for span in spans:
        assert span.attributes is not None
        assert span.attributes[SAGA_ID] == saga_id, span.name
        assert span.context is not None
        assert root.context is not None
        assert span.context.trace_id == root.context.trace_id, span.name
    assert "compensate hotel.book" in {s.name for s in spans}

    # The step is the child of the tool's span, with the model's id of the call; LlamaIndex's
    # spans have OpenInference kinds; the model's carry its name and token counts.
    kinds = {s.name: s.attributes["openinference.span.kind"] for s in llama if s.attributes}
    assert kinds["FunctionAgent.run"] == "AGENT"
    assert kinds["FunctionTool.acall"] == "TOOL"
    assert kinds["BaseWorkflowAgent.call_tool"] == "CHAIN"
    tool = next(s for s in llama if s.name == "FunctionTool.acall")
    step = next(s for s in spans if s.name == "execute_tool hotel.book")
    assert tool.attributes is not None
    assert step.attributes is not None
    assert tool.attributes["gen_ai.tool.call.id"] == "c1"
    assert step.attributes["gen_ai.tool.call.id"] == "c1"
    assert step.parent is not None
    assert tool.context is not None
    assert step.parent.span_id == tool.context.span_id
    chats = [s.attributes for s in llama if s.name == "CountingLLM.achat" and s.attributes]
    assert chats
    assert all(a["openinference.span.kind"] == "LLM" for a in chats)
    assert all(a["llm.model_name"] == "scripted-1" for a in chats)
    # Two model calls reported tokens (the dispatcher also sees the mock's own achat, which
    # reports none).
    counted = [a for a in chats if "llm.token_count.prompt" in a]
    assert len(counted) == 2
    for attributes in counted:
        assert attributes["gen_ai.usage.input_tokens"] == 12
        assert attributes["llm.token_count.total"] == 15


def test_outside_a_transaction_nothing_is_mirrored(
    tmp_path: Path, exporter: InMemorySpanExporter, link: LlamaIndexLink
) -> None:
    with AgentKit(home=tmp_path / "home", observers=[link]) as kit, kit.transaction("t"):
        pass  # installs the handler
    assert link.handler in get_dispatcher().span_handlers

    async def book(city: str) -> str:
        """Book a hotel."""
        return city

    asyncio.run(FunctionTool.from_defaults(async_fn=book).acall(city="Oslo"))
    assert exporter.get_finished_spans() == ()
