"""Test doubles for LlamaIndex agents: a scripted function-calling LLM that records its input.

Runs offline; use it to test an agent's transactions without a model provider.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.base.llms.types import ToolCallBlock
from llama_index.core.llms import ChatMessage, MessageRole
from llama_index.core.llms.mock import MockFunctionCallingLLM


def tool_call(name: str, call_id: str, **kwargs: Any) -> ChatMessage:
    """An assistant message that calls tool ``name`` with ``kwargs``."""
    return ChatMessage(
        role=MessageRole.ASSISTANT,
        blocks=[ToolCallBlock(tool_call_id=call_id, tool_name=name, tool_kwargs=kwargs)],
    )


def answer(text: str) -> ChatMessage:
    return ChatMessage(role=MessageRole.ASSISTANT, content=text)


class Script:
    """Answers each LLM call with the next scripted message; ``seen`` keeps every call's input."""

    def __init__(self, replies: Sequence[ChatMessage]) -> None:
        self.replies = list(replies)
        self.seen: list[list[ChatMessage]] = []

    def __call__(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        self.seen.append(list(messages))
        return self.replies.pop(0)

    def llm(self) -> MockFunctionCallingLLM:
        return MockFunctionCallingLLM(response_generator=self)
