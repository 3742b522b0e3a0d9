"""For the CPU affinity test: a job that reports the CPUs its own thread may run on, and its process."""

from __future__ import annotations

import hashlib
import os
import threading
import time

import redis

from cogworker import codec, job


@job
def report_cpus(tag: str) -> None:
    client = redis.Redis.from_url(os.environ["COGWORKER_REDIS_URL"])
    # pid 0: the calling thread's own mask, which is what a thread started after the pinning inherits.
    state = {"tag": tag, "pid": os.getpid(), "cpus": sorted(os.sched_getaffinity(0))}
    client.rpush("test:cpus", codec.dumps(state))


@job
def compute_beside_python(seconds: float) -> None:
    """Four threads hashing outside the GIL (hashlib lets go of it for large inputs) for `seconds`: a
    process that would use every CPU it may (four threads, so it gets more than one CPU's share of a
    machine other processes keep busy too). Reports its end on test:computed."""
    deadline = time.monotonic() + seconds
    data = b"x" * (4 << 20)

    def work() -> None:
        while time.monotonic() < deadline:
            hashlib.sha256(data).digest()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    redis.Redis.from_url(os.environ["COGWORKER_REDIS_URL"]).rpush("test:computed", os.getpid())
