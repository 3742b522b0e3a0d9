"""A job stuck where no exception reaches it, in a real swarm: its child files it once as failed with
JobTimeout and reports `stuck`; the supervisor replaces the child gracefully (the replacement is
ready before the old child is asked to stop, whose other job finishes); the metrics and systemd's
STATUS count it, and the job is never run again by recovery."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import demo_jobs
import pytest
import redis
import timeout_jobs

from tests.support import metrics
from tests.support.notify_listener import NotifyListener
from tests.support.redis_server import free_port, wait_until
from tests.support.swarm import SwarmRunner

pytestmark = pytest.mark.slow


@pytest.fixture
def listener(short_dir: Path) -> Iterator[NotifyListener]:
    made = NotifyListener("path", short_dir)
    try:
        yield made
    finally:
        made.close()


def test_a_stuck_job_gets_its_child_replaced_gracefully_and_is_counted(
    swarms: SwarmRunner, r: redis.Redis, configured: object, listener: NotifyListener
) -> None:
    port = free_port()
    swarm = swarms.start(
        NOTIFY_SOCKET=listener.notify_socket,
        COGWORKER_REQUIRE="timeout_jobs,demo_jobs",
        COGWORKER_COUNT="1",
        COGWORKER_CONCURRENCY="2",
        COGWORKER_JOB_TIMEOUT_GRACE_S="0.5",
        COGWORKER_METRICS_PORT=str(port),
    )
    swarm.wait_ready(1)
    [old_pid] = swarm.current_children().values()
    jid = timeout_jobs.blocked.perform_async("stuck")
    wait_until(lambda: r.get("test:runs:stuck") == "1", timeout=15, message="the stuck job started")
    demo_jobs.sleepy.perform_async("neighbour", 2.0)  # beside it in the same child: must finish
    wait_until(lambda: r.llen("test:started") == 1, timeout=10, message="the neighbour started")

    [replacing] = swarm.wait_event("replacing_child_with_stuck_job", timeout=15)
    assert replacing["child_pid"] == old_pid and replacing["jid"] == jid
    [replaced] = swarm.wait_event("child_replaced", timeout=20, reason="stuck")
    assert replaced["old_pid"] == old_pid
    [exited] = swarm.wait_event("child_exited", timeout=20, child_pid=old_pid)
    assert exited["reason"] == "stuck" and exited["requeue"] is False  # a graceful stop
    # The neighbour finished in the old child before it stopped.
    assert r.lrange("test:ran", 0, -1) == [f"neighbour {old_pid}"]

    # Filed once, in dead (retry=0), by the child itself; nothing left in progress or requeued.
    [raw] = r.zrange("cogworker:dead", 0, -1)
    entry: dict[str, Any] = json.loads(raw)
    assert entry["jid"] == jid and entry["error_class"] == "cogworker.api.time_limits.JobTimeout"
    assert r.llen("cogworker:queue:default") == 0
    assert r.keys("cogworker:inprogress:*") == []

    s = wait_until(
        lambda: metrics.value(got := metrics.scrape(port), "cogworker_jobs_stuck_total") == 1 and got,
        timeout=10,
        message="the stuck job in the metrics",
    )
    assert metrics.value(s, "cogworker_child_restarts_total", reason="stuck") == 1
    assert metrics.value(s, "cogworker_jobs_dead_total", job="timeout_jobs.blocked", queue="default") == 1
    listener.wait(
        lambda m: m.status is not None and m.status.endswith("1 replaced for stuck jobs"),
        what="STATUS counting the stuck replacement",
    )

    # The replacement serves, and recovery never runs the stuck job again.
    demo_jobs.record.perform_async("after")
    wait_until(lambda: any(x.startswith("after") for x in r.lrange("test:ran", 0, -1)), timeout=15)
    assert r.get("test:runs:stuck") == "1" and r.zcard("cogworker:dead") == 1
    assert swarm.stop() == 0
