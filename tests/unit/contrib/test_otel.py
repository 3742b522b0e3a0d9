"""cogworker.contrib.otel in one process, through the inline testing mode (the real client and
server chains, the real OpenTelemetry SDK with its in-memory exporter): the edges of a push and a
run that the end-to-end tests (tests/e2e/integrations/test_otel.py) don't reach."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import cogworker.testing
from cogworker import client_chain, job
from cogworker.api.current_job import JobCancelled
from cogworker.contrib import otel


@job(queue="unit")
def plain(note: str) -> str:
    return note


@job(queue="unit")
def cancelled(note: str) -> None:
    raise JobCancelled("j1")


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    found = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(found))
    otel.instrument(tracer_provider=provider)
    try:
        yield found
    finally:
        otel.uninstrument()


def by_name(exporter: InMemorySpanExporter) -> dict[str, Any]:
    return {span.name: span for span in exporter.get_finished_spans()}


def test_inline_push_and_run_are_one_trace_and_leave_no_context(exporter: InMemorySpanExporter) -> None:
    with cogworker.testing.inline():
        plain.perform_async("x")
    spans = by_name(exporter)
    push, perform = spans["push unit"], spans["perform unit"]
    assert perform.parent.span_id == push.context.span_id
    assert perform.attributes["cogworker.outcome"] == "done"
    assert not trace.get_current_span().get_span_context().is_valid


def test_a_dropped_push_and_a_failed_push_are_recorded(exporter: InMemorySpanExporter) -> None:
    def drop(job: dict[str, Any], call_next: Any) -> None:
        return None

    def refuse(job: dict[str, Any], call_next: Any) -> None:
        raise ConnectionError("redis down")

    with cogworker.testing.fake():
        client_chain.add(drop)
        try:
            assert plain.perform_async("x") is None
        finally:
            client_chain.remove(drop)
        client_chain.add(refuse)
        try:
            with pytest.raises(ConnectionError):
                plain.perform_async("y")
        finally:
            client_chain.remove(refuse)
    dropped, failed = exporter.get_finished_spans()
    assert dropped.attributes["cogworker.outcome"] == "dropped"
    assert failed.status.status_code.name == "ERROR" and failed.attributes["error.type"] == "ConnectionError"


def test_a_cancelled_job_is_no_failure(exporter: InMemorySpanExporter) -> None:
    with cogworker.testing.inline(), pytest.raises(JobCancelled):
        cancelled.perform_async("x")
    perform = by_name(exporter)["perform unit"]
    assert perform.attributes["cogworker.outcome"] == "cancelled"
    assert perform.status.status_code.name == "UNSET" and not perform.events


def test_an_unreadable_previous_attempt_is_no_link(exporter: InMemorySpanExporter) -> None:
    ran: list[str] = []
    otel.trace_perform(
        {"class": "x.y", "queue": "unit", "jid": "j", "otel_previous": {"traceparent": "nonsense"}},
        lambda: ran.append("ran"),
    )
    otel.trace_perform({"class": "x.y", "queue": "unit", "otel_previous": "nonsense"}, lambda: None)
    # Written by something else: values that aren't text are ignored, never the job's failure.
    hostile = {
        "class": "x.y",
        "queue": "unit",
        "otel": {"traceparent": 5},
        "otel_previous": {"traceparent": [1]},
    }
    otel.trace_perform(hostile, lambda: ran.append("ran too"))
    assert ran == ["ran", "ran too"]
    spans = exporter.get_finished_spans()
    assert [list(span.links) for span in spans] == [[], [], []]
    assert spans[2].parent is None


def test_uninstrument_takes_both_middleware_out(exporter: InMemorySpanExporter) -> None:
    otel.uninstrument()
    with cogworker.testing.inline():
        plain.perform_async("x")
    assert exporter.get_finished_spans() == ()
