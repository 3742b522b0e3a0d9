"""A job failing under cogworker, then under Sidekiq 6, on one Redis (Sidekiq's keys under cogworker's
prefix through redis-namespace). cogworker files its backtrace as Sidekiq does (`error_backtrace`,
api/backtrace.py) and leaves `backtrace` to Sidekiq's option of that name: Sidekiq's retry code read
the list cogworker once stored there as that option, crashed ("Internal exception!") and lost the job.
Here real Sidekiq takes the job from the retry set, runs it, fails it and files it for another retry;
Sidekiq's API and cogworker read each other's backtraces."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import redis
import sidekiq_bridge_jobs

from cogworker import codec
from cogworker.api.backtrace import lines_of
from tests.support.redis_server import RedisServer, wait_until
from tests.support.sidekiq import SidekiqProcess, ruby
from tests.support.workers import WorkerPool

pytestmark = pytest.mark.slow

# Sidekiq's API reading the retry set: each entry's jid, count and decoded backtrace.
READ_RETRIES = """
found = Sidekiq::RetrySet.new.map do |entry|
  [entry.jid, {"retry_count" => entry["retry_count"], "backtrace" => entry.error_backtrace}]
end
print JSON.generate(found.to_h)
"""


def retries(r: redis.Redis) -> dict[str, dict[str, Any]]:
    return {entry["jid"]: entry for entry in (json.loads(raw) for raw in r.zrange("cogworker:retry", 0, -1))}


def test_a_job_failed_under_cogworker_is_retried_by_sidekiq_and_each_reads_the_others_backtrace(
    r: redis.Redis, redis_server: RedisServer, configured: object, workers: WorkerPool, tmp_path: Path
) -> None:
    plain = sidekiq_bridge_jobs.bridge_job.perform_async(1)
    # Sidekiq's option: Sidekiq then stores its own backtrace over cogworker's.
    with_option = sidekiq_bridge_jobs.bridge_job.set(backtrace=True).perform_async(2)
    worker = workers.start(COGWORKER_REQUIRE="sidekiq_bridge_jobs", COGWORKER_POLL_INTERVAL_S="0.1")
    wait_until(lambda: len(retries(r)) == 2, timeout=30, message="both jobs failed once in cogworker")
    assert worker.stop() == 0
    filed = retries(r)
    for jid in (plain, with_option):
        assert filed[jid]["retry_count"] == 0 and filed[jid]["error_class"] == "ValueError"
        assert isinstance(filed[jid]["error_backtrace"], str)
    assert "backtrace" not in filed[plain]
    assert filed[with_option]["backtrace"] is True  # the option as given
    python_lines = lines_of(filed[plain]) or []
    assert python_lines[-1] == "ValueError: failed in cogworker: 1"

    # Due now: Sidekiq's poller moves them to the queue, its processor runs them, and its retry code
    # files each failure in the retry set again.
    for raw in r.zrange("cogworker:retry", 0, -1):
        r.zadd("cogworker:retry", {raw: 0}, xx=True)
    with SidekiqProcess(redis_server.url, tmp_path / "sidekiq.log") as sidekiq:
        wait_until(
            lambda: {jid: e["retry_count"] for jid, e in retries(r).items()} == {plain: 1, with_option: 1},
            timeout=90,
            message=f"both jobs failed again, in Sidekiq:\n{sidekiq.log_text()[-3000:]}",
        )
        assert sidekiq.stop() == 0
    assert "Internal exception" not in sidekiq.log_text()
    again = retries(r)
    assert again[plain]["error_class"] == again[with_option]["error_class"] == "RuntimeError"

    seen_by_sidekiq = codec.loads(ruby(READ_RETRIES, redis_server.url))
    # No option: Sidekiq stores no backtrace of its own, and reads cogworker's.
    assert seen_by_sidekiq[plain] == {"retry_count": 1, "backtrace": python_lines}
    # With it: Sidekiq's own, which cogworker reads as Sidekiq does.
    ruby_lines = seen_by_sidekiq[with_option]["backtrace"]
    assert any("sidekiq_bridge.rb" in line and "perform" in line for line in ruby_lines)
    assert lines_of(again[with_option]) == ruby_lines
