"""Test doubles for LangChain agents: a scripted tool-calling chat model and a minimal loop.

Both run offline; use them to test an agent's transactions without a model provider.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langchain_core.tools import BaseTool
from pydantic import Field


class ScriptedChat(BaseChatModel):
    """Returns ``script`` one message per call; ``seen`` keeps the messages of every call."""

    script: list[AIMessage]
    seen: list[list[BaseMessage]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.seen.append(list(messages))
        return ChatResult(generations=[ChatGeneration(message=self.script.pop(0))])

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        return self  # the script already holds the tool calls


def call(name: str, args: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


def agent_loop(model: BaseChatModel, tools: Sequence[BaseTool]) -> Runnable[Any, Any]:
    """A tool-calling loop on langchain-core: model, then every tool call, until it answers.

    Like LangGraph's ToolNode with error handling on, an exception from a tool becomes an
    error ToolMessage for the model, and the loop goes on.
    """
    by_name = {t.name: t for t in tools}
    bound = model.bind_tools(list(tools))

    def step(messages: list[BaseMessage], config: RunnableConfig) -> list[BaseMessage]:
        messages = list(messages)
        while True:
            ai = bound.invoke(messages, config)
            messages.append(ai)
            if not isinstance(ai, AIMessage) or not ai.tool_calls:
                return messages
            for tc in ai.tool_calls:
                try:
                    out = by_name[tc["name"]].invoke(dict(tc), config)
                except Exception as exc:
                    out = ToolMessage(f"Error: {exc}", tool_call_id=tc["id"], status="error")
                messages.append(out)

    async def astep(messages: list[BaseMessage], config: RunnableConfig) -> list[BaseMessage]:
        messages = list(messages)
        while True:
            ai = await bound.ainvoke(messages, config)
            messages.append(ai)
            if not isinstance(ai, AIMessage) or not ai.tool_calls:
                return messages
            for tc in ai.tool_calls:
                try:
                    out = await by_name[tc["name"]].ainvoke(dict(tc), config)
                except Exception as exc:
                    out = ToolMessage(f"Error: {exc}", tool_call_id=tc["id"], status="error")
                messages.append(out)

    return RunnableLambda(step, afunc=astep, name="agent_loop")
