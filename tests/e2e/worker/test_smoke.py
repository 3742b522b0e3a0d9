"""A first end-to-end check: `cogworker run` runs pushed jobs against a real Redis."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import redis

from tests.support.redis_server import RedisServer, wait_until


def test_cogworker_run_processes_jobs(redis_server: RedisServer, r: redis.Redis, configured) -> None:
    import demo_jobs

    for i in range(5):
        demo_jobs.record.perform_async(f"j{i}")
    env = dict(
        os.environ,
        COGWORKER_REDIS_URL=redis_server.url,
        COGWORKER_REQUIRE="demo_jobs",
        COGWORKER_CONCURRENCY="3",
        COGWORKER_LOG_FORMAT="json",
    )
    proc = subprocess.Popen([sys.executable, "-m", "cogworker", "run"], env=env, start_new_session=True)
    try:
        wait_until(lambda: r.llen("test:ran") == 5, timeout=15, message="5 jobs to run")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert r.get("cogworker:stat:processed") == "5"
    assert r.llen("cogworker:queue:default") == 0
    assert r.keys("cogworker:inprogress:*") == []
