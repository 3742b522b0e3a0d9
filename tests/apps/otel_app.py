"""The OpenTelemetry example of docs/integrations/otel.md, as the tests run it: the app module a
worker imports (COGWORKER_REQUIRE=otel_app) and a pushing process may import too.

It sets up the OpenTelemetry SDK, then `instrument()`. The tests export every span to the JSON-lines
file SPANS_FILE names (a real app would use an OTLP exporter and a BatchSpanProcessor), and a
middleware outside the tracing one records which span is current before and after each job: none,
or the context leaked into the thread that runs the next job.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import otel_jobs  # the jobs of this app
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

from cogworker import server_chain
from cogworker.contrib import otel


def _hex(value: int | None, width: int) -> str | None:
    return None if value is None else f"{value:0{width}x}"


class JsonLinesExporter(SpanExporter):
    """Each span as one JSON line in SPANS_FILE: the test reads the spans of every process there."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        for span in spans:
            assert span.context is not None
            otel_jobs.record(
                "span",
                name=span.name,
                kind=span.kind.name,
                trace_id=_hex(span.context.trace_id, 32),
                span_id=_hex(span.context.span_id, 16),
                parent_id=_hex(span.parent.span_id, 16) if span.parent else None,
                attributes=dict(span.attributes or {}),
                links=[
                    {"trace_id": _hex(link.context.trace_id, 32), "span_id": _hex(link.context.span_id, 16)}
                    for link in span.links
                ],
                status=span.status.status_code.name,
                start=span.start_time,
                end=span.end_time,
                events=[{"name": e.name, "attributes": dict(e.attributes or {})} for e in span.events],
            )
        return SpanExportResult.SUCCESS


def check_context(job: dict[str, Any], call_next: Any) -> None:
    before = otel_jobs.current_span_id()
    try:
        call_next()
    finally:
        otel_jobs.record("around", jid=job.get("jid"), before=before, after=otel_jobs.current_span_id())


provider = TracerProvider(resource=Resource.create({"service.name": "otel-app"}))
# SPANS_BATCH=1: the batching processor a real app uses (its thread restarts in a forked child).
batch = os.environ.get("SPANS_BATCH") == "1"
provider.add_span_processor((BatchSpanProcessor if batch else SimpleSpanProcessor)(JsonLinesExporter()))
trace.set_tracer_provider(provider)

server_chain.add(check_context)  # added first: runs outside the tracing middleware
otel.instrument()
