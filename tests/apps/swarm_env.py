"""For the fork-hygiene test: a job that reports what its process sees."""

from __future__ import annotations

import os

import redis

from cogworker import codec, job


@job
def environment(tag: str, names: list[str]) -> None:
    client = redis.Redis.from_url(os.environ["COGWORKER_REDIS_URL"], decode_responses=True)
    client.rpush(
        "test:env", codec.dumps({"tag": tag, "pid": os.getpid(), **{n: os.environ.get(n) for n in names}})
    )
