"""Reading upstream tool results, and building the gateway's own results for the client.

A result's *structured value* is what the log keeps as the step's result and what mappings read
as ``result``: its ``structuredContent`` when the upstream sent one, else the JSON object or
array held by its only text block (servers that predate output schemas), else nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agent_saga import RollbackReport
from mcp import types

_TEXT_LIMIT = 2000


def structured(result: types.CallToolResult) -> Any:
    """The result's structured value (see the module docstring), or ``None``."""
    if result.structured_content is not None:
        return result.structured_content
    texts = [block.text for block in result.content if isinstance(block, types.TextContent)]
    if len(texts) != 1 or len(result.content) != 1:
        return None
    try:
        value = json.loads(texts[0])
    except ValueError:
        return None
    return value if isinstance(value, dict | list) else None


def text_of(result: types.CallToolResult) -> str:
    """The result's text blocks joined, cut to a length fit for a log record or a message."""
    text = " ".join(b.text for b in result.content if isinstance(b, types.TextContent)).strip()
    if not text:
        text = f"({len(result.content)} non-text block(s))"
    return text if len(text) <= _TEXT_LIMIT else text[: _TEXT_LIMIT - 3] + "..."


def message(
    text: str, *, error: bool, data: Mapping[str, Any] | None = None
) -> types.CallToolResult:
    """A result made by the gateway itself: one text block, and ``data`` as structured content."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=dict(data) if data is not None else None,
        is_error=error,
    )


def with_note(result: types.CallToolResult, note: str) -> types.CallToolResult:
    """``result`` marked as an error, with the gateway's ``note`` appended as a text block.

    A new :class:`~mcp.types.CallToolResult` (never a copy of a subclass): a relayed result's
    original JSON (:class:`agent_saga_mcp._link.RelayedResult`) must not be sent in its place.
    """
    content = [*result.content, types.TextContent(type="text", text=note)]
    return types.CallToolResult(
        _meta=result.meta,
        content=content,
        structured_content=result.structured_content,
        is_error=True,
    )


def rollback_note(report: RollbackReport, cause: str) -> str:
    """What a rollback did, for the model: which steps were undone, newest first."""
    undone = ", ".join(f"#{ref.ordinal} {ref.tool}" for ref in report.compensated) or "nothing"
    text = f"agent-saga: {cause}; saga {report.saga_id} rolled back (compensated {undone})"
    if report.failed:
        failed = "; ".join(f"#{f.step.ordinal} {f.step.tool}: {f.error}" for f in report.failed)
        text += f"; compensation FAILED for {failed}: the saga needs a human"
    return text + "."


def report_data(report: RollbackReport) -> dict[str, Any]:
    """A rollback report as structured content."""
    return {
        "saga": report.saga_id,
        "status": report.status.value,
        "compensated": [{"ordinal": r.ordinal, "tool": r.tool} for r in report.compensated],
        "failed": [
            {"ordinal": f.step.ordinal, "tool": f.step.tool, "error": f.error}
            for f in report.failed
        ],
    }


__all__ = ["message", "report_data", "rollback_note", "structured", "text_of", "with_note"]
