"""For the CPU affinity test: a job that reports the CPUs its own thread may run on, and its process."""

from __future__ import annotations

import os

import redis

from cogworker import codec, job


@job
def report_cpus(tag: str) -> None:
    client = redis.Redis.from_url(os.environ["COGWORKER_REDIS_URL"])
    # pid 0: the calling thread's own mask, which is what a thread started after the pinning inherits.
    state = {"tag": tag, "pid": os.getpid(), "cpus": sorted(os.sched_getaffinity(0))}
    client.rpush("test:cpus", codec.dumps(state))
