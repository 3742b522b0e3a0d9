"""OpenTelemetry tracing for jobs (`pip install 'cogworker-redis[otel]'`; docs/integrations/otel.md).

`instrument()`, called in the app module the workers import and in the process that pushes, adds
one client and one server middleware:

- a push runs in a PRODUCER span (`push <queue>`) and writes that span's context into the payload
  (field `otel`, through the global propagator: W3C `traceparent`/`tracestate` by default);
- a worker extracts it and runs the job in a CONSUMER span (`perform <queue>`), its child, so one
  trace runs from the web request through the push and the job into whatever the job calls;
- a failure records the exception on the span and the span's own context in the payload (field
  `otel_previous`), which cogworker's retry keeps: the next attempt's span links to it.

Attributes follow the OpenTelemetry messaging conventions (`messaging.system` = "cogworker", the
queue as destination, the jid as message id), plus the job's class, retry count and outcome.

The span is made current with `context.attach` and always detached in a `finally`, on the thread
that runs the middleware. An `async def` job's task runs in a copy of that thread's context
(worker/running/async_loop.py), so it sees the span and can't leak a change back.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import context, propagate, trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from cogworker.api import retry
from cogworker.api.current_job import JobCancelled
from cogworker.api.middleware import ClientNext, ServerNext, client_chain, server_chain
from cogworker.api.registry import registered

# The push's context, as the propagator wrote it ({"traceparent": ..., "tracestate": ...}).
CONTEXT_FIELD = "otel"
# The last failed attempt's span, in W3C form whatever the propagator: only this module reads it.
PREVIOUS_FIELD = "otel_previous"
SYSTEM = "cogworker"

_W3C = TraceContextTextMapPropagator()
_tracer: trace.Tracer | None = None


def instrument(tracer_provider: trace.TracerProvider | None = None) -> None:
    """Trace every push and job of this process: adds `trace_push` and `trace_perform` to the chains.

    Call it in the process that pushes and in the app module the workers import. Calling it again
    only changes the provider.

    Args:
        tracer_provider: The provider to trace with. Default: OpenTelemetry's global one.
    """
    global _tracer
    _tracer = trace.get_tracer(__name__, tracer_provider=tracer_provider)
    client_chain.add(trace_push)
    server_chain.add(trace_perform)


def uninstrument() -> None:
    """Stop tracing: take `trace_push` and `trace_perform` out of the chains."""
    global _tracer
    client_chain.remove(trace_push)
    server_chain.remove(trace_perform)
    _tracer = None


def _attributes(job: dict[str, Any], operation: str, kind: str) -> dict[str, str | int]:
    found: dict[str, str | int] = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": kind,
        "messaging.operation.name": operation,
        "messaging.destination.name": str(job.get("queue")),
        "messaging.message.id": str(job.get("jid") or ""),
        "cogworker.job.class": str(job.get("class")),
    }
    count = job.get("retry_count")
    if isinstance(count, int) and not isinstance(count, bool):
        found["cogworker.retry_count"] = count
    return found


def _record_failure(span: trace.Span, exc: BaseException) -> None:
    span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"[:500]))
    span.set_attribute("error.type", type(exc).__qualname__)


def trace_push(job: dict[str, Any], call_next: ClientNext) -> Any:
    """Client middleware: the push's PRODUCER span, whose context travels in the payload.

    Args:
        job: The payload being pushed.
        call_next: The rest of the client chain.

    Returns:
        What the rest of the chain returned: the jid, or None when the push was stopped.
    """
    tracer = _tracer or trace.get_tracer(__name__)
    queue = str(job.get("queue"))
    with tracer.start_as_current_span(
        f"push {queue}",
        kind=SpanKind.PRODUCER,
        attributes=_attributes(job, "push", "send"),
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        if carrier:
            job[CONTEXT_FIELD] = carrier
        try:
            jid = call_next(job)
        except BaseException as exc:
            _record_failure(span, exc)
            raise
        # None: a middleware inside this one stopped the push.
        span.set_attribute("cogworker.outcome", "pushed" if jid is not None else "dropped")
        return jid


def _carrier(value: Any) -> dict[str, str]:
    """A payload field as a propagator's carrier: its string entries only. Anyone who can write to
    Redis writes payloads; a malformed trace context is ignored, never the job's failure."""
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


def _links(job: dict[str, Any]) -> list[Link]:
    previous = _carrier(job.get(PREVIOUS_FIELD))
    if not previous:
        return []
    span_context = trace.get_current_span(_W3C.extract(previous)).get_span_context()
    if not span_context.is_valid:
        return []
    return [Link(span_context, {"cogworker.link": "previous_attempt"})]


def trace_perform(job: dict[str, Any], call_next: ServerNext) -> None:
    """Server middleware: the job's CONSUMER span, a child of the push's span.

    Args:
        job: The payload being run.
        call_next: The rest of the server chain, ending in the job.
    """
    tracer = _tracer or trace.get_tracer(__name__)
    # The push's context (with its baggage) is current for the whole job, then detached.
    token = context.attach(propagate.extract(_carrier(job.get(CONTEXT_FIELD))))
    try:
        with tracer.start_as_current_span(
            f"perform {job.get('queue')}",
            kind=SpanKind.CONSUMER,
            attributes=_attributes(job, "perform", "process"),
            links=_links(job),
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            _perform(job, call_next, span)
    finally:
        context.detach(token)


def _perform(job: dict[str, Any], call_next: ServerNext, span: trace.Span) -> None:
    try:
        call_next()
    except JobCancelled:
        span.set_attribute("cogworker.outcome", "cancelled")
        raise
    except BaseException as exc:
        _record_failure(span, exc)
        found = registered(str(job.get("class")))
        again = retry.will_retry(job, exc, found.options if found else None)
        span.set_attribute("cogworker.outcome", "retry" if again else "dead")
        # Kept by the filing (retry.on_failure copies the job): the next attempt links to this one,
        # a retry from the dead set too.
        previous: dict[str, str] = {}
        _W3C.inject(previous, context=trace.set_span_in_context(span))
        if previous:
            job[PREVIOUS_FIELD] = previous
        raise
    span.set_attribute("cogworker.outcome", "done")
