"""Jobs used by the tests. Each one records what happened in Redis so tests can assert it."""

from __future__ import annotations

import os
import time

import redis

from cogworker import job


def _redis() -> redis.Redis:
    url = os.environ.get("COGWORKER_REDIS_URL", "redis://localhost:6379/0")
    return redis.Redis.from_url(url, decode_responses=True)


@job
def record(tag: str) -> None:
    """Appends `tag pid` to a list: which jobs ran, and in which process."""
    _redis().rpush("test:ran", f"{tag} {os.getpid()}")


@job(retry=2)
def boom(message: str) -> None:
    raise ValueError(message)


@job(retry=False)
def boom_once(message: str) -> None:
    raise RuntimeError(message)


@job
def sleepy(tag: str, seconds: float) -> None:
    """Marks its start, sleeps, marks its end."""
    client = _redis()
    client.rpush("test:started", f"{tag} {os.getpid()}")
    time.sleep(seconds)
    client.rpush("test:ran", f"{tag} {os.getpid()}")


@job
def kill_me(tag: str) -> None:
    """Kills its own process: a poison pill."""
    _redis().rpush("test:started", f"{tag} {os.getpid()}")
    os.kill(os.getpid(), 9)


@job(queue="other")
def on_other(tag: str) -> None:
    _redis().rpush("test:ran", f"other:{tag}")


@job
def push_more(tag: str) -> None:
    record.perform_async(f"{tag}-child")


@job
def to_file(path: str, tag: str, seconds: float = 0.0) -> None:
    """Appends a line to a file (not Redis): runs the same while Redis is away."""
    time.sleep(seconds)
    with open(path, "a") as out:
        out.write(f"{tag} {os.getpid()}\n")


@job(retry=False)
def fail_later(seconds: float) -> None:
    time.sleep(seconds)
    raise RuntimeError("failed while Redis may be away")


@job
def when_file(gate: str, out: str, fail: bool = False) -> None:
    """Runs until `gate` exists (the test says when, whatever Redis is doing), then appends a line to
    `out` and, with `fail`, raises: a job that ends at a moment of the test's choosing."""
    while not os.path.exists(gate):
        time.sleep(0.02)
    with open(out, "a") as sink:
        sink.write(f"ran {os.getpid()}\n")
    if fail:
        raise RuntimeError("failed when told to")


@job
def held(tag: str) -> None:
    """Marks its start, runs until the test pushes to `test:release` (at most a minute), marks its end."""
    client = _redis()
    client.rpush("test:started", f"{tag} {os.getpid()}")
    client.blpop(["test:release"], timeout=60)
    client.rpush("test:ran", f"{tag} {os.getpid()}")
