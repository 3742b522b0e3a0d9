"""Jobs for the OpenTelemetry tests (tests/e2e/integrations/test_otel.py). Each opens a span of its
own, as whatever a job calls would, and records which span is current after it (`record`)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

from line_sink import append_line
from opentelemetry import trace

from cogworker import current_job, job

tracer = trace.get_tracer("otel_jobs")


def record(what: str, **fields: Any) -> None:
    """One JSON line in SPANS_FILE (the spans' file), in one write: workers append at once."""
    append_line(os.environ["SPANS_FILE"], json.dumps({"record": what, "pid": os.getpid(), **fields}))


def current_span_id() -> str | None:
    span_context = trace.get_current_span().get_span_context()
    return f"{span_context.span_id:016x}" if span_context.is_valid else None


def _after_call() -> None:
    running = current_job()
    record("job", jid=running.jid if running else None, current=current_span_id())


@job(queue="traced")
def work(tag: str) -> None:
    with tracer.start_as_current_span(f"inside {tag}"):
        pass
    _after_call()


_arrived: list[str] = []


@job(queue="traced")
async def work_async(tag: str, together: int = 1) -> None:
    """Holds its span open until `together` of these are inside theirs at once on this process's
    loop (or fails after 30 s), so the test knows they overlapped."""
    with tracer.start_as_current_span(f"inside {tag}"):
        _arrived.append(tag)
        deadline = time.monotonic() + 30
        while len(_arrived) < together:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {_arrived} arrived")
            await asyncio.sleep(0.01)
    _after_call()


@job(queue="traced", retry=2, retry_in=lambda count, exc: 0)
def always_fails(tag: str) -> None:
    raise ValueError(f"boom {tag}")
