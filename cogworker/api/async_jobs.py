"""`async def` jobs: telling them apart, refusing a job that returns an awaitable, and running one to
completion outside a worker (the testing modes).

A worker runs a coroutine job on its event loop (worker/running/async_loop.py); everything else about the
job (payload, middleware, retries, dead, unique, status) is a plain job's. A sync job that returns
an awaitable (a coroutine it forgot to await, a future) is an error: its result would be dropped
unrun, the job silently lost. The coroutine is closed, so Python warns of nothing.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import threading
from collections.abc import Callable, Coroutine
from typing import Any


def is_async(func: Callable[..., Any]) -> bool:
    """`func` is an `async def` function."""
    return inspect.iscoroutinefunction(func)


def check_result(name: str, result: Any) -> None:
    """A sync job's return value: an awaitable raises TypeError (the job fails and follows its retry
    policy), after closing a coroutine so it never warns "was never awaited"."""
    if not inspect.isawaitable(result):
        return
    what = "a coroutine" if inspect.iscoroutine(result) else f"an awaitable ({type(result).__name__})"
    if inspect.iscoroutine(result):
        result.close()
    raise TypeError(
        f"job {name} returned {what}; declare it `async def` so the worker awaits it "
        "(a sync job's awaitable is never run)"
    )


def run_to_completion(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a job's coroutine to its end from synchronous code (the testing modes' `drain`, `inline`).

    No event loop running in this thread: `asyncio.run`. Called from inside a running loop (an async
    test calling `drain()`), this thread can't wait for that loop without deadlocking it, so the
    coroutine runs to completion with `asyncio.run` on a helper thread while the caller waits, as
    any blocking call made from async code would: the job gets a loop of its own, so it must not use
    objects bound to the caller's loop. Its exception is raised here either way."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = asyncio.run(coro)
        except BaseException as exc:  # the job's failure, raised again in the caller
            outcome["error"] = exc

    # The caller's context goes along (contextvars set by middleware, structlog's bound values).
    context = contextvars.copy_context()
    helper = threading.Thread(target=context.run, args=(run,), name="cogworker-testing-async", daemon=True)
    helper.start()
    helper.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")
