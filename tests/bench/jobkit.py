"""What every benchmark job does, shared by the four job modules so each system runs the same bodies.

A job reports to the bench through the bench Redis (`BENCH_REDIS_URL`), on a connection of its own.
That costs each system the same round trips per job, and the harness subtracts those commands when
it counts a system's own Redis commands per job (see workloads.commands_per_job).

Keys (all in the bench Redis, flushed between steps):
  bench:done              counter, one INCR per no-op job
  bench:t:first           epoch seconds when the counter reached 1
  bench:t:last            epoch seconds when the counter reached BENCH_TARGET (W1 sets it)
  bench:latency           list of pickup latencies in ms (W2)
  bench:events            list of "start|end <index> <pid> <epoch>" lines (W3)
"""

from __future__ import annotations

import os
import time

import redis

DONE = "bench:done"
T_FIRST = "bench:t:first"
T_LAST = "bench:t:last"
LATENCY = "bench:latency"
EVENTS = "bench:events"

_client: redis.Redis | None = None
_client_pid = 0


def client() -> redis.Redis:
    """A connection per process: prefork pools and rq's work horses fork after we may have connected."""
    global _client, _client_pid
    if _client is None or _client_pid != os.getpid():
        _client = connect(os.environ["BENCH_REDIS_URL"])
        _client_pid = os.getpid()
    return _client


def connect(url: str) -> redis.Redis:
    # RESP2 and no CLIENT SETINFO: a new connection then sends no command of its own, so the only
    # commands the bench adds are the ones it counts (rq's horses reconnect for every job).
    return redis.Redis.from_url(url, protocol=2, driver_info=None)


def mark_done() -> None:
    """The no-op job's body. Two SETs per run at most, so the drain is timed by the jobs themselves."""
    now = time.time()
    count = int(client().incr(DONE))
    if count == 1:
        client().set(T_FIRST, repr(now))
    if count == int(os.environ.get("BENCH_TARGET", "0")):
        client().set(T_LAST, repr(time.time()))


def record_pickup(pushed_at: float) -> None:
    """W2's job: how long after its push did a worker start it."""
    started = time.time()
    client().rpush(LATENCY, repr((started - pushed_at) * 1000.0))


def sleep_job(index: int, seconds: float) -> None:
    """W3's job: a slow job that says when and where it started and ended."""
    pid = os.getpid()
    client().rpush(EVENTS, f"start {index} {pid} {time.time()!r}")
    time.sleep(seconds)
    client().rpush(EVENTS, f"end {index} {pid} {time.time()!r}")
