"""LlamaIndex tools and agents inside agent-saga transactions.

Wrap the tools once (:func:`saga_tool`, :func:`saga_tools`) and run the agent inside a
transaction (:func:`run_agent`, or ``async with kit.transaction():``): each tool call is gated,
logged and compensated in reverse order if the run fails.
"""

from ._run import run_agent
from ._tools import PAUSES, SagaToolProxy, saga_tool, saga_tools

__all__ = ["PAUSES", "SagaToolProxy", "run_agent", "saga_tool", "saga_tools"]
