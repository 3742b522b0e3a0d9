"""The demo app `make run` starts (cogworker/demo.py): its jobs do what their docstrings say, and its
producer pushes batches of them to a real Redis until Ctrl-C, which ends it with exit 0."""

from __future__ import annotations

import random
import signal
import subprocess
import sys

import pytest
import redis

from cogworker import demo
from cogworker.store import keys
from tests.support.daemon_env import clean_env
from tests.support.redis_server import RedisServer, wait_until


def test_the_demo_jobs_run_and_flaky_fails_by_its_chance() -> None:
    demo.greet("ada")
    demo.crunch(1000)
    demo.flaky(0.0)
    random.seed(1)
    with pytest.raises(RuntimeError, match="the demo dice said no"):
        demo.flaky(1.0)


def test_the_producer_pushes_batches_until_ctrl_c(redis_server: RedisServer, r: redis.Redis) -> None:
    env = clean_env()
    env["COGWORKER_REDIS_URL"] = redis_server.url
    producer = subprocess.Popen(
        [sys.executable, "-m", "cogworker.demo", "--rate", "100"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        # Ten batches: greet and flaky on the queue now, crunch scheduled up to 5 s ahead. The eleventh
        # batch's first job on the queue means the tenth batch is done and its line printed: a Ctrl-C
        # while the tenth crunch's reply is on its way would stop the producer before its print.
        wait_until(lambda: r.llen(keys.queue("default")) >= 21, message="the eleventh batch begun")
        assert r.zcard(keys.SCHEDULE) >= 10
        producer.send_signal(signal.SIGINT)
        out, _ = producer.communicate(timeout=30)
    finally:
        if producer.poll() is None:
            producer.kill()
            producer.wait()
    assert producer.returncode == 0
    assert "demo producer: 30 jobs pushed" in out
