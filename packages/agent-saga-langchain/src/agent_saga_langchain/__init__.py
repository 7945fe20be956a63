"""LangChain tools and agent loops inside agent-saga transactions.

Wrap the tools once (:func:`saga_tool`, :func:`saga_tools`) and run the agent inside a
transaction (:func:`invoke_in_saga`, or any ``with kit.transaction():`` block): each tool call is
gated, logged and compensated in reverse order if the run fails.
"""

from ._config import (
    SAGA_ID_KEY,
    THREAD_SAGA_KEY,
    ainvoke_in_saga,
    invoke_in_saga,
    saga_config,
    saga_of_thread,
    thread_config,
)
from ._tools import SagaTool, saga_tool, saga_tools

__all__ = [
    "SAGA_ID_KEY",
    "THREAD_SAGA_KEY",
    "SagaTool",
    "ainvoke_in_saga",
    "invoke_in_saga",
    "saga_config",
    "saga_of_thread",
    "saga_tool",
    "saga_tools",
    "thread_config",
]
