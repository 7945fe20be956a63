"""Calling user code (compensators, probes) from synchronous code, whatever loop runs here."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Awaitable, Callable
from typing import Any


def run_coroutine(awaitable: Awaitable[Any]) -> Any:
    """Run ``awaitable`` to completion from sync code and return its value.

    With no event loop in this thread it runs on a fresh one; when a loop runs here (a sync
    transaction inside async code) it runs on a fresh loop in a helper thread, so the running
    loop is never re-entered. Whatever the awaitable raises is raised here.
    """
    import asyncio  # deferred: only sync callers of async user code need it

    async def collect() -> Any:
        return await awaitable

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(collect())
    box: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            box.append(asyncio.run(collect()))
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=run, name="agent-saga-compensate")
    worker.start()
    worker.join()
    if errors:
        raise errors[0]
    return box[0]


def call_to_completion(func: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    """``func(**kwargs)``, awaited to completion when it is async; its value."""
    outcome = func(**kwargs)
    if inspect.isawaitable(outcome):
        return run_coroutine(outcome)
    return outcome
