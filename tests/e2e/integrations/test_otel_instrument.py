"""Zero-code tracing: cogworker's `opentelemetry_instrumentor` entry point. A producer started as
`opentelemetry-instrument python producer.py` and a worker started as `opentelemetry-instrument
cogworker run`, neither with a line of OpenTelemetry code (tests/apps/demo_jobs.py has none), export
spans with the SDK's console exporter (OTEL_TRACES_EXPORTER=console); the worker's CONSUMER span is
the child of the producer's PRODUCER span, in one trace across the two processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import demo_jobs
import pytest
import redis
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from cogworker import testing
from cogworker.api.middleware import client_chain, server_chain
from cogworker.contrib import otel
from cogworker.contrib.otel_instrumentor import CogworkerInstrumentor
from tests.support.daemon_env import clean_env
from tests.support.otel_console import console_spans, of_kind
from tests.support.redis_server import RedisServer, wait_until
from tests.support.swarm import SwarmRunner, swarm_runner

BIN = Path(sys.executable).parent
PRODUCER = """
import demo_jobs
print("jid", demo_jobs.record.perform_async("traced"), flush=True)
"""


def otel_env(redis_url: str, service: str, **more: str) -> dict[str, str]:
    return clean_env(
        more,
        COGWORKER_REDIS_URL=redis_url,
        COGWORKER_REQUIRE="demo_jobs",
        OTEL_SERVICE_NAME=service,
        OTEL_TRACES_EXPORTER="console",
        OTEL_METRICS_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none",
        # The batching processor's delay: the worker's span is written soon after its job.
        OTEL_BSP_SCHEDULE_DELAY="50",
    )


def produce(tmp_path: Path, redis_url: str, **env: str) -> tuple[str, list[dict[str, Any]]]:
    script = tmp_path / "producer.py"
    script.write_text(PRODUCER)
    done = subprocess.run(
        [str(BIN / "opentelemetry-instrument"), sys.executable, str(script)],
        env=otel_env(redis_url, "producer", **env),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    [jid] = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("jid ")]
    return jid, console_spans(done.stdout)


@pytest.fixture
def instrumented_worker(redis_server: RedisServer, r: redis.Redis, tmp_path: Path) -> Iterator[Path]:
    """`opentelemetry-instrument cogworker run`; yields the file its stdout (the spans) goes to."""
    out, err = tmp_path / "worker.out", tmp_path / "worker.err"
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        proc = subprocess.Popen(
            [str(BIN / "opentelemetry-instrument"), str(BIN / "cogworker"), "run"],
            env=otel_env(redis_server.url, "worker", COGWORKER_POLL_INTERVAL_S="0.1"),
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
        )
    try:
        yield out
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(timeout=30) == 0, err.read_text()[-2000:]
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def test_opentelemetry_instrument_links_the_worker_s_span_to_the_producer_s(
    r: redis.Redis, redis_server: RedisServer, tmp_path: Path, instrumented_worker: Path
) -> None:
    jid, produced = produce(tmp_path, redis_server.url)
    [push] = of_kind(produced, "PRODUCER")
    assert push["name"] == "push default" and push["parent_id"] is None
    assert push["attributes"]["messaging.message.id"] == jid
    assert push["resource"]["attributes"]["service.name"] == "producer"
    wait_until(lambda: r.lrange("test:ran", 0, -1), timeout=30, message="the job run")

    def performed() -> list[dict[str, Any]]:
        return of_kind(console_spans(instrumented_worker.read_text()), "CONSUMER")

    [perform] = wait_until(performed, timeout=30, message="the worker's CONSUMER span")
    assert perform["name"] == "perform default"
    assert perform["context"]["trace_id"] == push["context"]["trace_id"]
    assert perform["parent_id"] == push["context"]["span_id"]
    assert perform["attributes"]["messaging.message.id"] == jid
    assert perform["attributes"]["cogworker.outcome"] == "done"
    assert perform["resource"]["attributes"]["service.name"] == "worker"


@pytest.fixture
def swarms(redis_server: RedisServer, r: redis.Redis, tmp_path: Path) -> Iterator[SwarmRunner]:
    yield from swarm_runner(redis_server.url, tmp_path)


def test_opentelemetry_instrument_on_the_swarm_traces_in_its_forked_workers(
    r: redis.Redis, redis_server: RedisServer, tmp_path: Path, swarms: SwarmRunner
) -> None:
    """`opentelemetry-instrument cogworker-swarm`: the fork server is set up by the agent like any
    Python process it starts, and the workers it forks export their spans."""
    jid, produced = produce(tmp_path, redis_server.url)
    [push] = of_kind(produced, "PRODUCER")
    env: dict[str, Any] = otel_env(redis_server.url, "swarm", COGWORKER_CONCURRENCY="1")
    swarm = swarms.start(command=[str(BIN / "opentelemetry-instrument"), str(BIN / "cogworker-swarm")], **env)
    swarm.wait_ready(timeout=60)

    def performed() -> list[dict[str, Any]]:
        return of_kind(console_spans(swarm.log_path.read_text(errors="replace")), "CONSUMER")

    [perform] = wait_until(performed, timeout=30, message="a CONSUMER span in the swarm's output")
    assert perform["parent_id"] == push["context"]["span_id"]
    assert perform["attributes"]["messaging.message.id"] == jid
    assert swarm.stop() == 0


def test_the_instrumentation_can_be_disabled_by_name(
    r: redis.Redis, redis_server: RedisServer, tmp_path: Path
) -> None:
    jid, produced = produce(tmp_path, redis_server.url, OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="cogworker")
    assert produced == []
    [payload] = [json.loads(item) for item in r.lrange("cogworker:queue:default", 0, -1)]
    assert payload["jid"] == jid and "otel" not in payload


def test_instrument_and_uninstrument_add_and_remove_the_middleware() -> None:
    """The instrumentor by hand, as `opentelemetry-instrument` calls it, with a provider of the test's."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = CogworkerInstrumentor()
    with testing.fake():
        instrumentor.instrument(tracer_provider=provider)
        try:
            assert otel.trace_push in client_chain.entries and otel.trace_perform in server_chain.entries
            demo_jobs.record.perform_async("traced")
        finally:
            instrumentor.uninstrument()
        assert otel.trace_push not in client_chain.entries
        assert otel.trace_perform not in server_chain.entries
        demo_jobs.record.perform_async("untraced")
        traced, untraced = demo_jobs.record.jobs
    [push] = exporter.get_finished_spans()
    assert (push.name, push.kind.name) == ("push default", "PRODUCER")
    assert push.context is not None
    assert traced["otel"]["traceparent"].split("-")[2] == f"{push.context.span_id:016x}"
    assert "otel" not in untraced
