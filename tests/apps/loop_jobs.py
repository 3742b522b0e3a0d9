"""`async def` jobs for tests/unit/worker/running/test_async_process.py: each records, in this
process, where it ran (the thread) and what it saw."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from typing import Any

from cogworker import job

# What the jobs saw, in the order they ran: (tag, thread name, tenant).
seen: list[tuple[str, str, str]] = []
current_tenant: contextvars.ContextVar[str] = contextvars.ContextVar("loop_jobs_tenant", default="unset")
started = threading.Event()


@job(status=True, unique="until_executed")
async def tracked(tag: str) -> str:
    await asyncio.sleep(0)
    seen.append((tag, threading.current_thread().name, current_tenant.get()))
    return tag


@job(status=True, retry=2)
async def boom(tag: str) -> None:
    await asyncio.sleep(0)
    raise ValueError(f"boom {tag}")


@job(status=True)
async def waits(tag: str, seconds: float) -> None:
    started.set()
    await asyncio.sleep(seconds)
    seen.append((tag, threading.current_thread().name, current_tenant.get()))


@job(timeout_s=0.2, retry=1)
async def overruns(tag: str) -> None:
    await asyncio.sleep(30)


@job
async def for_tenant(tag: str, *, tenant: str) -> None:
    seen.append((tag, threading.current_thread().name, current_tenant.get()))


@job
def plain(tag: str) -> None:
    seen.append((tag, threading.current_thread().name, current_tenant.get()))


def clear() -> None:
    seen.clear()
    started.clear()


__all__: list[Any] = []
