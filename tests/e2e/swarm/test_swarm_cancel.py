"""`cogworker.cancel` in a real swarm: a running job cancelled in a child is counted in the swarm's
Prometheus metrics by queue and job, and a job cancelled just before its child is SIGKILLed is not
run again: the supervisor's immediate requeue (in the fork server) drops it as cancelled."""

from __future__ import annotations

import os
import signal

import cancel_jobs
import redis

import cogworker
from cogworker.store import keys
from tests.support import metrics
from tests.support.redis_server import free_port, wait_until
from tests.support.swarm import SwarmRunner, stays

APP = {"COGWORKER_REQUIRE": "cancel_jobs", "COGWORKER_COUNT": "1"}


def cancelled_metric(port: int, job: str) -> float | None:
    return metrics.value(metrics.scrape(port), "cogworker_jobs_cancelled_total", queue="default", job=job)


def shown_running(r: redis.Redis, jid: str) -> bool:
    return any(jid in value for key in r.keys(keys.WORK_PREFIX + "*") for value in r.hvals(key))


def test_a_cancelled_job_is_counted_in_the_metrics(
    swarms: SwarmRunner, r: redis.Redis, configured: object
) -> None:
    port = free_port()
    swarm = swarms.start(COGWORKER_METRICS_PORT=str(port), COGWORKER_METRICS_HOST="127.0.0.1", **APP)
    swarm.wait_ready()
    jid = cancel_jobs.cooperative.perform_async("metric")
    wait_until(lambda: shown_running(r, jid), timeout=15, message="the job shown running")
    assert cogworker.cancel(jid).case == "running"
    wait_until(
        lambda: cancelled_metric(port, "cancel_jobs.cooperative") == 1.0, timeout=15, message="the metric"
    )
    assert r.lrange("test:ended", 0, -1) == ["metric saw JobCancelled"]
    assert r.get(keys.stat("cancelled")) == "1"
    assert swarm.stop() == 0


def test_a_job_cancelled_as_its_child_dies_is_not_requeued(
    swarms: SwarmRunner, r: redis.Redis, configured: object
) -> None:
    swarm = swarms.start(**APP)
    swarm.wait_ready()
    jid = cancel_jobs.stubborn.perform_async("dying", 60)
    wait_until(lambda: shown_running(r, jid), timeout=15, message="the job shown running")
    [child] = swarm.children()
    assert cogworker.cancel(jid).case == "running"
    os.kill(child.pid, signal.SIGKILL)  # at once: the child may not even have read the cancel
    dropped = wait_until(
        lambda: swarm.events("cancelled_job_not_requeued"), timeout=15, message="the requeue to drop it"
    )
    assert [e["jid"] for e in dropped] == [jid]
    swarm.wait_ready()  # the child's replacement
    assert r.get(keys.stat("cancelled")) == "1"
    assert r.llen(keys.queue("default")) == 0
    stays(lambda: r.get("test:runs:dying") == "1", 1.0, "the job never runs again")
    assert r.zcard(keys.RETRY) == 0 and r.zcard(keys.DEAD) == 0
    assert swarm.stop() == 0
