"""For the memory test: a job that makes its process grow, and keeps it grown."""

from __future__ import annotations

import os

import redis

from cogworker import job

_held: list[bytes] = []


@job
def hog(tag: str, mb: int) -> None:
    # Filled bytes, not bytearray(n): untouched zero pages would not count in RSS.
    _held.append(b"\x01" * (mb * 1024 * 1024))
    client = redis.Redis.from_url(os.environ["COGWORKER_REDIS_URL"], decode_responses=True)
    client.rpush("test:ran", f"{tag} {os.getpid()}")
