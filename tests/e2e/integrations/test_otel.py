"""OpenTelemetry across processes: this test process pushes (with the real SDK, spans kept by its
in-memory exporter), a real `cogworker run` worker runs the job with tests/apps/otel_app.py's setup
(spans to a JSON-lines file), and one trace runs from the test's "request" span through the push
into the job and what the job calls. Kinds, attributes, retry links and the context detached after
each job, on a sync job's thread and for `async def` jobs, are checked on the exported spans."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import otel_jobs
import pytest
import redis
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from cogworker.contrib import otel
from tests.support.first_call import first_call
from tests.support.redis_server import RedisServer, wait_until
from tests.support.swarm import SwarmRunner, swarm_runner
from tests.support.workers import WorkerPool


class Pusher:
    """This process's tracing: its provider, its spans, and a "request" span to push inside."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("test")

    def spans(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.name == name]


@pytest.fixture
def pusher(configured: object) -> Iterator[Pusher]:
    found = Pusher()
    otel.instrument(tracer_provider=found.provider)
    try:
        yield found
    finally:
        otel.uninstrument()


@pytest.fixture
def swarms(redis_server: RedisServer, r: redis.Redis, tmp_path: Path) -> Iterator[SwarmRunner]:
    yield from swarm_runner(redis_server.url, tmp_path)


@pytest.fixture
def spans_file(tmp_path: Path) -> Path:
    return tmp_path / "spans.jsonl"


def records(path: Path, what: str, **match: Any) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    found = [json.loads(line) for line in path.read_text().splitlines()]
    return [x for x in found if x["record"] == what and all(x.get(k) == v for k, v in match.items())]


def wait_for(path: Path, count: int, what: str, **match: Any) -> list[dict[str, Any]]:
    return wait_until(
        lambda: len(found := records(path, what, **match)) >= count and found,
        timeout=30,
        message=f"{count} {what} records {match} in {path}",
    )


def performs(path: Path, jid: str) -> list[dict[str, Any]]:
    """The job's CONSUMER spans, one per attempt, in the order they ended."""
    found = records(path, "span", kind="CONSUMER")
    return [span for span in found if span["attributes"]["messaging.message.id"] == jid]


def start_worker(workers: WorkerPool, spans_file: Path, **env: str) -> None:
    worker = workers.start(
        COGWORKER_REQUIRE="otel_app",
        COGWORKER_QUEUES="traced",
        COGWORKER_POLL_INTERVAL_S="0.1",
        SPANS_FILE=str(spans_file),
        **env,
    )
    worker.identity(timeout=30)


def hex_ids(span: ReadableSpan) -> tuple[str, str]:
    assert span.context is not None
    return f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}"


def test_one_trace_runs_from_the_request_through_the_push_into_the_job(
    r: redis.Redis, pusher: Pusher, workers: WorkerPool, spans_file: Path
) -> None:
    with pusher.tracer.start_as_current_span("request"):
        jid = otel_jobs.work.perform_async("a")
    [request] = pusher.spans("request")
    [push] = pusher.spans("push traced")
    trace_id, push_id = hex_ids(push)
    assert push.kind.name == "PRODUCER" and push.parent is not None
    assert push.parent.span_id == request.context.span_id  # type: ignore[union-attr]
    assert dict(push.attributes or {}) == {
        "messaging.system": "cogworker",
        "messaging.operation.type": "send",
        "messaging.operation.name": "push",
        "messaging.destination.name": "traced",
        "messaging.message.id": jid,
        "cogworker.job.class": "otel_jobs.work",
        "cogworker.outcome": "pushed",
    }
    start_worker(workers, spans_file)
    wait_for(spans_file, 1, "around", jid=jid)  # written once the job's span has ended
    [inside] = records(spans_file, "span", name="inside a")
    [perform] = records(spans_file, "span", name="perform traced")
    assert perform["kind"] == "CONSUMER" and perform["status"] == "UNSET"
    assert (perform["trace_id"], perform["parent_id"]) == (trace_id, push_id)
    assert perform["attributes"] == {
        "messaging.system": "cogworker",
        "messaging.operation.type": "process",
        "messaging.operation.name": "perform",
        "messaging.destination.name": "traced",
        "messaging.message.id": jid,
        "cogworker.job.class": "otel_jobs.work",
        "cogworker.outcome": "done",
    }
    assert (inside["trace_id"], inside["parent_id"]) == (trace_id, perform["span_id"])
    [after] = records(spans_file, "job", jid=jid)
    assert after["current"] == perform["span_id"]  # the job's own span closed, the job's is current


def test_a_job_thread_is_back_to_no_context_after_each_job(
    r: redis.Redis, pusher: Pusher, workers: WorkerPool, spans_file: Path
) -> None:
    """One job thread runs them all, one after another: a context left attached by one would
    become the parent of the next job's span (the last one, pushed outside any span, a root)."""
    jids = []
    for tag in ("t1", "t2", "t3"):
        with pusher.tracer.start_as_current_span(f"request {tag}"):
            jids.append(otel_jobs.work.perform_async(tag))
    otel.uninstrument()  # pushed untraced: no context in the payload
    untraced = otel_jobs.work.perform_async("t4")
    assert "otel" not in json.loads(r.lindex("cogworker:queue:traced", 0) or "{}")
    start_worker(workers, spans_file, COGWORKER_CONCURRENCY="1")
    wait_for(spans_file, 4, "around")
    pushes = {span.attributes["messaging.message.id"]: span for span in pusher.spans("push traced")}  # type: ignore[index]
    assert sorted(pushes) == sorted(jids)
    for jid in [*jids, untraced]:
        [perform] = performs(spans_file, jid)
        if jid in pushes:
            assert (perform["trace_id"], perform["parent_id"]) == hex_ids(pushes[jid])
        else:
            assert perform["parent_id"] is None
        [around] = records(spans_file, "around", jid=jid)
        assert around["before"] is None and around["after"] is None
    assert len({x["pid"] for x in records(spans_file, "around")}) == 1


def test_async_jobs_on_one_loop_each_see_their_own_span(
    r: redis.Redis, pusher: Pusher, workers: WorkerPool, spans_file: Path
) -> None:
    """Three `async def` jobs at once on the worker's loop: each one's inner span is a child of its
    own CONSUMER span, its own span is current again after it, and the carrier thread that ran the
    middleware has no context left."""
    jids = []
    for tag in ("a1", "a2", "a3"):
        with pusher.tracer.start_as_current_span(f"request {tag}"):
            jids.append(otel_jobs.work_async.perform_async(tag, 3))
    start_worker(workers, spans_file)
    wait_for(spans_file, 3, "around")
    pushes = {span.attributes["messaging.message.id"]: span for span in pusher.spans("push traced")}  # type: ignore[index]
    for tag, jid in zip(("a1", "a2", "a3"), jids, strict=True):
        [perform] = performs(spans_file, jid)
        assert (perform["trace_id"], perform["parent_id"]) == hex_ids(pushes[jid])
        [inside] = records(spans_file, "span", name=f"inside {tag}")
        assert inside["parent_id"] == perform["span_id"]
        [after] = records(spans_file, "job", jid=jid)
        assert after["current"] == perform["span_id"]
        [around] = records(spans_file, "around", jid=jid)
        assert around["before"] is None and around["after"] is None
    inner = [span for span in records(spans_file, "span") if span["name"].startswith("inside a")]
    # They overlapped on the loop (each waited for the others inside its span).
    assert max(span["start"] for span in inner) < min(span["end"] for span in inner)
    assert len({span["pid"] for span in inner}) == 1


def test_a_retried_job_links_each_attempt_to_the_one_before(
    r: redis.Redis, pusher: Pusher, workers: WorkerPool, spans_file: Path
) -> None:
    with pusher.tracer.start_as_current_span("request"):
        jid = otel_jobs.always_fails.perform_async("x")  # retry=2, at once: three attempts, then dead
    [push] = pusher.spans("push traced")
    trace_id, push_id = hex_ids(push)
    start_worker(workers, spans_file)
    wait_until(lambda: r.zcard("cogworker:dead") == 1, timeout=30, message="the job dead")
    attempts = wait_until(lambda: len(found := performs(spans_file, jid)) == 3 and found, message="3 spans")
    assert [a["attributes"].get("cogworker.retry_count") for a in attempts] == [None, 0, 1]
    assert [a["attributes"]["cogworker.outcome"] for a in attempts] == ["retry", "retry", "dead"]
    previous = None
    for attempt in attempts:
        assert (attempt["trace_id"], attempt["parent_id"]) == (trace_id, push_id)
        assert attempt["status"] == "ERROR" and attempt["attributes"]["error.type"] == "ValueError"
        [event] = attempt["events"]
        assert event["name"] == "exception"
        assert event["attributes"]["exception.message"] == "boom x"
        assert attempt["links"] == ([] if previous is None else [{"trace_id": trace_id, "span_id": previous}])
        previous = attempt["span_id"]
    dead = json.loads(r.zrange("cogworker:dead", 0, 0)[0])
    assert dead["otel_previous"]["traceparent"].startswith(f"00-{trace_id}-{previous}-")


def test_first_call_a_fresh_app_process_pushes_and_a_worker_continues_its_trace(
    r: redis.Redis, redis_server: Any, workers: WorkerPool, spans_file: Path
) -> None:
    """The app module's setup, configured only by env, in a fresh interpreter that pushes inside a
    span of its own; the worker's spans join that trace."""
    jid = first_call(
        """
        import otel_app, otel_jobs
        from opentelemetry import trace
        from cogworker.contrib import otel
        with trace.get_tracer("first").start_as_current_span("first request"):
            print(otel_jobs.work.perform_async("first"))
            otel.uninstrument()
            otel_jobs.work.perform_async("untraced")
        """,
        redis_server.url,
        COGWORKER_REQUIRE="otel_app",
        SPANS_FILE=str(spans_file),
    )
    untraced = json.loads(r.lindex("cogworker:queue:traced", 0) or "{}")
    assert untraced["args"] == ["untraced"] and "otel" not in untraced  # after uninstrument()
    [request] = records(spans_file, "span", name="first request")
    [push] = records(spans_file, "span", name="push traced")
    assert push["parent_id"] == request["span_id"] and push["kind"] == "PRODUCER"
    start_worker(workers, spans_file)
    wait_for(spans_file, 1, "around", jid=jid)
    [inside] = records(spans_file, "span", name="inside first")
    [perform] = performs(spans_file, jid)
    assert perform["parent_id"] == push["span_id"] and inside["parent_id"] == perform["span_id"]
    assert len({request["trace_id"], push["trace_id"], perform["trace_id"], inside["trace_id"]}) == 1
    assert perform["pid"] != push["pid"]


def test_a_preloading_swarm_traces_in_its_children_with_a_batching_processor(
    r: redis.Redis, pusher: Pusher, swarms: SwarmRunner, spans_file: Path
) -> None:
    """The app (SDK set up, BatchSpanProcessor) imported once by the fork server: each forked child
    exports its own spans, continuing the pusher's traces."""
    jids = []
    for tag in ("s1", "s2", "s3", "s4"):
        with pusher.tracer.start_as_current_span(f"request {tag}"):
            jids.append(otel_jobs.work.perform_async(tag))
    swarm = swarms.start(
        COGWORKER_REQUIRE="otel_app",
        COGWORKER_QUEUES="traced",
        COGWORKER_PRELOAD="true",
        SPANS_FILE=str(spans_file),
        SPANS_BATCH="1",
        OTEL_BSP_SCHEDULE_DELAY="100",
    )
    swarm.wait_ready(timeout=60)
    wait_for(spans_file, 4, "span", name="perform traced")
    pushes = {span.attributes["messaging.message.id"]: span for span in pusher.spans("push traced")}  # type: ignore[index]
    for jid in jids:
        [perform] = performs(spans_file, jid)
        assert (perform["trace_id"], perform["parent_id"]) == hex_ids(pushes[jid])
    assert swarm.stop() == 0
