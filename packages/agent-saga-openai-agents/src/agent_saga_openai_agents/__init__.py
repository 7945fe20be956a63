"""OpenAI Agents SDK tools and runs inside agent-saga transactions.

Wrap the function tools once (:func:`saga_tool`, :func:`saga_tools`) and run the agent inside a
transaction (:func:`run_in_saga`, or ``async with kit.transaction():`` around ``Runner.run``):
each tool call is gated, logged and compensated in reverse order if the run fails.
"""

from ._approvals import SdkApprovals, approve
from ._run import SAGA_ID_KEY, resume_run, run_in_saga, saga_run_config, suspend_run
from ._tools import GUARDRAIL_NAME, saga_tool, saga_tools

__all__ = [
    "GUARDRAIL_NAME",
    "SAGA_ID_KEY",
    "SdkApprovals",
    "approve",
    "resume_run",
    "run_in_saga",
    "saga_run_config",
    "saga_tool",
    "saga_tools",
    "suspend_run",
]
