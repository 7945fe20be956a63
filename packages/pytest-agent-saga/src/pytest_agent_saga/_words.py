"""How steps and calls are named in failure messages: the way the log names them."""

from __future__ import annotations

import json

MAX_ARGS_TEXT = 200


def step_name(ordinal: int, tool: str) -> str:
    """``step #2 pay.charge``: a step's identity, as ``agent-saga show`` prints it."""
    return f"step #{ordinal} {tool}"


def call_text(tool: str, args: object) -> str:
    """``pay.charge(amount=10)``, shortened to a readable length."""
    if isinstance(args, dict):
        inner = ", ".join(
            f"{k}={json.dumps(v, sort_keys=True, default=str)}" for k, v in args.items()
        )
    else:
        inner = json.dumps(args, sort_keys=True, default=str)
    if len(inner) > MAX_ARGS_TEXT:
        inner = inner[: MAX_ARGS_TEXT - 3] + "..."
    return f"{tool}({inner})"
