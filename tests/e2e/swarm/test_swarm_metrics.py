"""Prometheus metrics from a real swarm (COGWORKER_METRICS_PORT), scraped over HTTP while it works."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
import redis

from cogworker import codec, exitcodes
from cogworker.api import payload
from tests.support.metrics import Samples, scrape, value
from tests.support.redis_server import free_port, wait_until
from tests.support.swarm import Swarm, SwarmRunner

pytestmark = pytest.mark.slow


class Scraper:
    """Scrapes one swarm until a condition on its samples holds."""

    def __init__(self, swarm: Swarm, port: int) -> None:
        self.swarm = swarm
        self.port = port
        self.last: Samples = {}

    def until(self, what: str, check: Callable[[Samples], bool], timeout: float = 15) -> Samples:
        def attempt() -> Samples | None:
            self.last = scrape(self.port)
            return self.last if self.last and check(self.last) else None

        found: Samples = wait_until(
            attempt, timeout=timeout, interval=0.05, message=f"{what}; last scrape: {self.pretty()}"
        )
        return found

    def pretty(self) -> str:
        interesting = {k: v for k, v in self.last.items() if k[0].startswith("cogworker_")}
        return json.dumps(
            {f"{n}{dict(labels)}": v for (n, labels), v in sorted(interesting.items())}, indent=1
        )


def metrics_swarm(swarms: SwarmRunner, **env: str) -> tuple[Swarm, Scraper]:
    port = free_port()
    swarm = swarms.start(COGWORKER_METRICS_PORT=str(port), COGWORKER_METRICS_HOST="127.0.0.1", **env)
    scraper = Scraper(swarm, port)
    # A swarm starting beside three other test streams on two cores has taken more than 15 s.
    scraper.until(
        "both children ready", lambda s: value(s, "cogworker_children", state="ready") == 2, timeout=45
    )
    return swarm, scraper


def listens_on(proc: psutil.Process, port: int) -> bool:
    return any(
        c.status == psutil.CONN_LISTEN and c.laddr.port == port for c in proc.net_connections(kind="tcp")
    )


def started(r: redis.Redis, tag: str) -> list[int]:
    return [int(line.split()[1]) for line in r.lrange("test:started", 0, -1) if line.split()[0] == tag]


def test_job_counts_children_threads_and_queues(
    swarms: SwarmRunner, r: redis.Redis, configured: object
) -> None:
    import demo_jobs

    swarm, scraper = metrics_swarm(swarms, COGWORKER_TIMEOUT_S="1")
    assert swarm.supervisor_events("metrics_serving")[0]["port"] == scraper.port
    # Only the supervisor listens: neither the fork server nor a worker holds the socket (a restarted
    # supervisor could not bind it while they did).
    assert listens_on(psutil.Process(swarm.pid), scraper.port)
    for proc in [*swarm.forkservers(), *swarm.children()]:
        assert not listens_on(proc, scraper.port)
    s = scraper.last
    assert value(s, "cogworker_threads") == 4  # 2 children x COGWORKER_CONCURRENCY=2
    assert value(s, "cogworker_busy_threads") == 0
    for state in ("booting", "quiet", "stopping"):
        assert value(s, "cogworker_children", state=state) == 0
    assert value(s, "cogworker_redis_up") == 1

    for i in range(3):
        demo_jobs.record.perform_async(f"ok{i}")
    demo_jobs.boom_once.perform_async("straight to dead")
    demo_jobs.boom.perform_async("to the retry set")
    record = {"queue": "default", "job": "demo_jobs.record"}
    dead = {"queue": "default", "job": "demo_jobs.boom_once"}
    retried = {"queue": "default", "job": "demo_jobs.boom"}
    s = scraper.until(
        "every job counted",
        lambda s: (
            value(s, "cogworker_jobs_processed_total", **record) == 3
            and value(s, "cogworker_jobs_failed_total", **dead) == 1
            and value(s, "cogworker_jobs_failed_total", **retried) == 1
            # The Redis part of a scrape is cached for a second: it may trail the children's counts.
            and value(s, "cogworker_set_size", set="dead") == 1
            and value(s, "cogworker_set_size", set="retry") == 1
        ),
    )
    assert value(s, "cogworker_jobs_failed_total", **record) == 0
    assert value(s, "cogworker_jobs_dead_total", **record) == 0
    assert value(s, "cogworker_jobs_processed_total", **dead) == 0
    assert value(s, "cogworker_jobs_dead_total", **dead) == 1
    assert value(s, "cogworker_jobs_retried_total", **dead) == 0
    assert value(s, "cogworker_jobs_retried_total", **retried) == 1
    assert value(s, "cogworker_jobs_dead_total", **retried) == 0
    # Every finished job is in the duration histogram, failures included.
    assert value(s, "cogworker_job_duration_seconds_count", **record) == 3
    assert value(s, "cogworker_job_duration_seconds_count", **dead) == 1
    assert value(s, "cogworker_job_duration_seconds_bucket", **record, le="+Inf") == 3
    assert (value(s, "cogworker_job_duration_seconds_sum", **record) or 0) > 0

    # Busy threads: two long jobs running.
    demo_jobs.sleepy.perform_async("busy-a", 30.0)
    demo_jobs.sleepy.perform_async("busy-b", 30.0)
    wait_until(
        lambda: len(started(r, "busy-a") + started(r, "busy-b")) == 2, message="both long jobs running"
    )
    scraper.until("two busy threads", lambda s: value(s, "cogworker_busy_threads") == 2)

    # Queue gauges, for a queue this swarm doesn't read: a job that has waited a minute.
    job = payload.build("demo_jobs.record", ("late",), {}, queue="elsewhere", retry=False)
    job["enqueued_at"] = time.time() - 60
    r.lpush("cogworker:queue:elsewhere", codec.dumps(job))
    r.lpush("cogworker:queue:elsewhere", codec.dumps({**job, "jid": "second", "enqueued_at": time.time()}))
    r.sadd("cogworker:queues", "elsewhere")
    r.sadd("cogworker:paused", "elsewhere")
    s = scraper.until(
        "the queue",
        lambda s: (
            value(s, "cogworker_queue_size", queue="elsewhere") == 2
            and value(s, "cogworker_queue_paused", queue="elsewhere") == 1
        ),
    )
    latency = value(s, "cogworker_queue_latency_seconds", queue="elsewhere")
    assert latency is not None and 60 <= latency < 90  # the oldest job, popped next
    assert value(s, "cogworker_queue_size", queue="default") == 0
    assert value(s, "cogworker_queue_latency_seconds", queue="default") == 0

    swarm.signal(signal.SIGTERM)
    # The long jobs outlive COGWORKER_TIMEOUT_S: requeued by their children, who then exit cleanly.
    assert swarm.wait() == exitcodes.OK
    assert r.llen("cogworker:queue:default") == 2


def test_a_child_killed_mid_job_counts_a_restart_and_a_recovery(
    swarms: SwarmRunner, r: redis.Redis, configured: object
) -> None:
    import demo_jobs

    swarm, scraper = metrics_swarm(swarms, COGWORKER_CONCURRENCY="1")
    s = scraper.last
    assert value(s, "cogworker_child_restarts_total", reason="signal") == 0
    assert value(s, "cogworker_jobs_recovered_total") == 0

    demo_jobs.sleepy.perform_async("victim", 1.0)
    victim = wait_until(lambda: started(r, "victim"), message="the job to start")[0]
    os.kill(victim, signal.SIGKILL)
    exited = swarm.wait_event("child_exited", child_pid=victim)[0]
    reason = exited["reason"]
    assert reason == "signal"  # what the swarm calls a child killed by a signal
    s = scraper.until(
        "the restart and the recovery counted",
        lambda s: (
            value(s, "cogworker_child_restarts_total", reason=reason) == 1
            and (value(s, "cogworker_jobs_recovered_total") or 0) >= 1
            and value(s, "cogworker_children", state="ready") == 2
        ),
    )
    assert value(s, "cogworker_recovery_seconds_count") == 1
    assert value(s, "cogworker_child_restarts_total", reason="crash") == 0
    wait_until(lambda: len(started(r, "victim")) == 2, message="the recovered job to run again")
    scraper.until(
        "the recovered job counted once it finished",
        lambda s: value(s, "cogworker_jobs_processed_total", queue="default", job="demo_jobs.sleepy") == 1,
    )
    assert swarm.stop() == exitcodes.OK


def test_a_port_it_cannot_bind_is_exit_1_with_one_line(swarms: SwarmRunner) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        swarm = swarms.start(COGWORKER_METRICS_PORT=str(port), COGWORKER_METRICS_HOST="127.0.0.1")
        assert swarm.wait() == exitcodes.FAILURE
    output = swarm.log_path.read_text().splitlines()
    plain = [line for line in output if not line.startswith("{")]
    assert len(plain) == 1, output
    assert plain[0].startswith(f"cogworker-swarm: can't serve metrics on 127.0.0.1:{port}: ")
    assert "in use" in plain[0]
    assert swarm.supervisor_events("child_started") == []


def accept_backlog(port: int) -> int:
    """Connections waiting to be accepted on the listening socket at 127.0.0.1:`port` (the
    rx_queue of a LISTEN entry in /proc/net/tcp is its accept queue)."""
    local = f"0100007F:{port:04X}"
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1] == local and fields[3] == "0A":
            return int(fields[4].split(":")[1], 16)
    raise AssertionError(f"nothing listens on 127.0.0.1:{port}")


def test_idle_connections_cost_the_supervisor_no_threads(swarms: SwarmRunner) -> None:
    swarm, scraper = metrics_swarm(swarms)
    supervisor = psutil.Process(swarm.pid)
    threads = supervisor.num_threads()
    idle = [socket.create_connection(("127.0.0.1", scraper.port), timeout=5) for _ in range(300)]
    try:
        # A thread per connection would be started as each is taken off the listen backlog.
        wait_until(lambda: accept_backlog(scraper.port) == 0, message="every connection accepted")
        started = time.monotonic()
        assert scrape(scraper.port)
        assert time.monotonic() - started < 1.0
        assert supervisor.num_threads() <= threads + 1
    finally:
        for sock in idle:
            sock.close()
    assert swarm.stop() == exitcodes.OK
