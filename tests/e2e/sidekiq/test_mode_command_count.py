"""The Sidekiq mode costs a plain job nothing: a worker runs the same number of Redis commands per job
with COGWORKER_SIDEKIQ_COMPAT=6 (bare keys) as with the mode off.

Counted as the README's "Redis commands per job" is (INFO commandstats over a drain, the commands
scripts run included), for one worker process of one thread, so each fetch takes one job and a drain
costs the same every time. What a process costs whatever its jobs (start-up, its beats, its stop; the
mode may add its Sidekiq presence there) is taken out: the per-job figure is the difference between a
drain of 2N jobs and a drain of N, over N."""

from __future__ import annotations

import contextlib

import pytest
import sidekiq_fleet_jobs as jobs

import cogworker
from cogworker.api import client as cw_client
from cogworker.settings import load_settings
from tests.support.redis_server import RedisServer, wait_until
from tests.support.workers import Worker

pytestmark = pytest.mark.slow

JOBS = 500
# The loops that tick on the clock (the cancel record's read, about once a second) may add a command
# or two to the longer drain: 0.01 per job is 5 commands, far under one command more per job.
NOISE_PER_JOB = 0.01
# The figure with the mode off before the mode existed (23fda51): the fetch script, with the previous
# job's ack, and the commands it runs. The mode's work must not change it.
OFF_BEFORE_THE_MODE = 9.0


def drain_commands(mode: str, count: int) -> int:
    """Commands Redis ran while one worker, in `mode`, started, ran `count` queued plain jobs and
    stopped."""
    with contextlib.closing(RedisServer()) as server, contextlib.closing(server.client()) as client:
        cw_client.configure(load_settings(redis_url=server.url, sidekiq_compat=mode))
        cogworker.push_bulk(jobs.plain_job, [(n,) for n in range(count)])
        client.config_resetstat()
        worker = Worker(
            server.url,
            COGWORKER_REQUIRE="sidekiq_fleet_jobs",
            COGWORKER_QUEUES="plain",
            COGWORKER_CONCURRENCY="1",
            COGWORKER_LOG_LEVEL="info",
            COGWORKER_SIDEKIQ_COMPAT=mode,
        )
        try:
            # Read from the worker's log, not from Redis: the test's own commands stay out of the count.
            wait_until(
                lambda: len(worker.events_named("job_done")) == count,
                timeout=60,
                interval=0.05,
                message=f"{count} jobs done in mode {mode}:\n{worker.log_text()[-3000:]}",
            )
            assert worker.stop() == 0
        finally:
            worker.kill()
        stats = client.info("commandstats")
        return sum(int(v["calls"]) for k, v in stats.items() if k not in ("cmdstat_info", "cmdstat_config"))


def commands_per_job(mode: str) -> float:
    return (drain_commands(mode, 2 * JOBS) - drain_commands(mode, JOBS)) / JOBS


def test_the_mode_adds_no_redis_command_per_job() -> None:
    off = commands_per_job("off")
    on = commands_per_job("6")
    print(f"FIGURE commands per job (one thread): mode off {off:.3f}, COGWORKER_SIDEKIQ_COMPAT=6 {on:.3f}")
    assert abs(off - OFF_BEFORE_THE_MODE) <= NOISE_PER_JOB, f"mode off: {off:.3f} commands per job"
    assert abs(on - off) <= NOISE_PER_JOB, f"mode off: {off:.3f} commands per job, mode 6: {on:.3f}"
