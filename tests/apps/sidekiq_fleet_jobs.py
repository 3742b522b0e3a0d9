"""The Python side of a mixed fleet (tests/e2e/sidekiq/): FleetPythonJob, which cogworker runs from the
`fleet_py` queue, and FleetRubyJob, a stub under the name of the Ruby class in
tests/apps/sidekiq_fleet_jobs.rb, so Python can push jobs that Sidekiq runs from `fleet_rb`.

Both classes count their attempts and successes by jid in Redis hashes the test reads, and fail their
first attempt when their second argument says so: each side's retries then cross the shared retry set."""

from __future__ import annotations

import functools
import os
import time

import redis

import cogworker

PY_QUEUE = "fleet_py"
RB_QUEUE = "fleet_rb"
# jid -> attempts started / successes, for each class (the Ruby class writes the `rb` ones).
PY_ATTEMPTS, PY_DONE = "fleet:py:attempts", "fleet:py:done"
RB_ATTEMPTS, RB_DONE = "fleet:rb:attempts", "fleet:rb:done"
# The jids of the retries Sidekiq's poller moved to their queue (the others, cogworker's poller did).
GRADUATED_BY_RUBY = "fleet:graduated_by_ruby"


@functools.cache
def _redis() -> redis.Redis:
    return redis.Redis.from_url(os.environ["COGWORKER_REDIS_URL"], decode_responses=True)


# Retried at once (the default backoff's first step is 15 to 24 s): the retry set's pollers, this
# process's or Sidekiq's, move it back to its queue at their next look.
@cogworker.job(name="FleetPythonJob", queue=PY_QUEUE, retry_in=lambda count, exc: 0)
def fleet_python_job(n: int, fail_first: bool, work_s: float = 0.0) -> None:
    _attempt(n, fail_first, work_s)


# The same, retried ten minutes later: an entry that stays in the retry set until a test moves it.
@cogworker.job(name="FleetLateRetryJob", queue=PY_QUEUE, retry_in=lambda count, exc: 600)
def fleet_late_retry_job(n: int, fail_first: bool, work_s: float = 0.0) -> None:
    _attempt(n, fail_first, work_s)


def _attempt(n: int, fail_first: bool, work_s: float) -> None:
    jid = cogworker.current_job().jid
    attempt = _redis().hincrby(PY_ATTEMPTS, jid, 1)
    if work_s:
        time.sleep(work_s)
    if fail_first and attempt == 1:
        raise RuntimeError(f"the first attempt of {n} fails")
    _redis().hincrby(PY_DONE, jid, 1)


@cogworker.job(name="FleetRubyJob", queue=RB_QUEUE)
def fleet_ruby_job(n: int, fail_first: bool) -> None:
    """Runs in Ruby (FleetRubyJob#perform): never fetched by cogworker, which reads no Ruby queue."""
    raise AssertionError("FleetRubyJob runs in Sidekiq")


@cogworker.job(queue="plain")
def plain_job(n: int) -> None:
    """No work: what a job costs in Redis commands is cogworker's own."""
