"""What every benchmark job does, shared by the four job modules so each system runs the same bodies.

A job reports to the bench through the bench Redis (`BENCH_REDIS_URL`), on a connection of its own.
That costs each system the same round trips per job, and the harness subtracts those commands when
it counts a system's own Redis commands per job (see workloads.commands_per_job).

Keys (all in the bench Redis, flushed between steps):
  bench:done              counter, one INCR per no-op job
  bench:t:first           epoch seconds when the counter reached 1
  bench:t:last            epoch seconds when the counter reached BENCH_TARGET (W1 sets it)
  bench:latency           list of pickup latencies in ms (W2)
  bench:paced             list of "<push epoch> <pickup latency ms>" lines (the load curve)
  bench:events            list of "start|end <index> <pid> <epoch>" lines (W3)
  bench:runs              hash "<queue> <index>" -> runs of that job (the shards curve's faults)
  bench:q:<queue>         counter, one INCR per run of a job of <queue> (the shards curve's faults)
  bench:w4:runs           hash index -> how many times W4 job <index> completed (all must be 1)
  bench:w4:lag            list of loop lags in ms, one per W4 job (see w4_job)
  bench:w4:incr           counter, one INCR per W4 job of the `redis` body (its real round trip)
  bench:w4:pids           hash pid -> W4 jobs completed in that process
  bench:w4:peak           sorted set pid -> most W4 jobs that process had asleep at once
"""

from __future__ import annotations

import asyncio
import os
import select
import socket
import threading
import time

import redis
import redis.asyncio

DONE = "bench:done"
T_FIRST = "bench:t:first"
T_LAST = "bench:t:last"
LATENCY = "bench:latency"
PACED = "bench:paced"
EVENTS = "bench:events"
RUNS = "bench:runs"
PER_QUEUE = "bench:q:"
W4_RUNS = "bench:w4:runs"
W4_LAG = "bench:w4:lag"
W4_PIDS = "bench:w4:pids"
W4_PEAK = "bench:w4:peak"
W4_INCR = "bench:w4:incr"
W4_SLEEP_S = 0.005
W4_BODIES = ("sleep", "redis")
W4_CONNECTIONS = 16  # per process: the async client's pool (aclient)
IO_WAIT_S = 0.01

_local = threading.local()


def client() -> redis.Redis:
    """The calling thread's own connection, as the Ruby body's Bench.redis is (jobs_sidekiq.rb).

    One connection held by the client, not a pool: redis-py checks a pooled connection out and back
    for every command, and the check-out polls the socket first (one more system call, one more
    release of the GIL). From 8 threads a pooled INCR took about twice the CPU of one on a held
    connection (97 against 45 us, in a loop of INCRs alone), which Ruby's body never paid. Keyed by pid
    too: prefork pools and rq's work horses fork after their parent may have connected."""
    found: redis.Redis | None = getattr(_local, "client", None)
    if found is None or _local.pid != os.getpid():
        found = connect(os.environ["BENCH_REDIS_URL"], single_connection_client=True)
        _local.client, _local.pid = found, os.getpid()
    return found


def connect(url: str, single_connection_client: bool = False) -> redis.Redis:
    # RESP2 and no CLIENT SETINFO: a new connection then sends no command of its own, so the only
    # commands the bench adds are the ones it counts (rq's horses reconnect for every job).
    return redis.Redis.from_url(
        url, protocol=2, driver_info=None, single_connection_client=single_connection_client
    )


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


def record_paced(pushed_at: float) -> None:
    """The load curve's job (curves/load.py): its push time too, so the run can leave out the warm-up."""
    started = time.time()
    client().rpush(PACED, f"{pushed_at!r} {(started - pushed_at) * 1000.0!r}")


def mark_tagged(queue: str, index: int) -> None:
    """The shards curve's faults job (curves/shards_faults.py): W1's body, and which job ran and how
    often (lost and doubled jobs), and its queue's count (each queue's pace through a failover)."""
    pipe = client().pipeline(transaction=False)
    pipe.hincrby(RUNS, f"{queue} {index}", 1)
    pipe.incr(PER_QUEUE + queue)
    pipe.execute()
    mark_done()


_quiet: list[socket.socket] = []


def io_wait() -> None:
    """The procs curve's I/O-bound job: 10 ms in a blocking wait on a socket, then W1's body.

    The socket is one end of a pair nobody writes to, so the wait is the kernel's (select with a
    timeout, the GIL released), as a network read's is, without a server's answer time to measure
    too. Not a Redis BLPOP with a 10 ms timeout: Redis wakes blocked clients on its hz timer, so an
    idle Redis answers such a BLPOP after 100 ms, a busy one after 10."""
    if not _quiet:
        _quiet.extend(socket.socketpair())  # one pair per process; a race makes a spare, no harm
    select.select([_quiet[0]], [], [], IO_WAIT_S)
    mark_done()


def sleep_job(index: int, seconds: float) -> None:
    """W3's job: a slow job that says when and where it started and ended."""
    pid = os.getpid()
    client().rpush(EVENTS, f"start {index} {pid} {time.time()!r}")
    time.sleep(seconds)
    client().rpush(EVENTS, f"end {index} {pid} {time.time()!r}")


# W4: one async client per (process, event loop). Dramatiq's AsyncIO middleware, arq, SAQ and
# cogworker each run a process's async jobs on one loop, but a client must never cross loops.
_aclients: dict[tuple[int, int], redis.asyncio.Redis] = {}
_asleep = 0
_peak = 0


def aclient() -> redis.asyncio.Redis:
    key = (os.getpid(), id(asyncio.get_running_loop()))
    found = _aclients.get(key)
    if found is None:
        # A bounded pool, its connections opened as jobs need them and kept: with an unbounded one,
        # the first 500 jobs in flight opened 500 connections at once, and the connects alone
        # stalled the loop for half a second (the lag W4 measures), more the more jobs a system
        # kept in flight. A job that finds every connection busy awaits one, off the loop's time.
        pool = redis.asyncio.BlockingConnectionPool.from_url(
            os.environ["BENCH_REDIS_URL"],
            protocol=2,
            driver_info=None,
            max_connections=W4_CONNECTIONS,
            timeout=None,
        )
        found = redis.asyncio.Redis(connection_pool=pool)
        _aclients[key] = found
    return found


async def w4_job(index: int) -> None:
    """W4's job, the same `async def` body for every system. Its body is chosen by the worker's
    environment, BENCH_W4_BODY (W4_BODIES): `sleep` awaits asyncio.sleep(0.005); `redis` makes one
    real round trip instead, an INCR of W4_INCR on the process's async client.

    The loop lag is how late a timer set by the job wakes, past its time: for `sleep` its own 5 ms
    sleep (loop time after - before - 0.005 s); for `redis`, a sleep(0) taken just before the INCR
    (the time its wake-up waited in the loop's ready queue). Either is the time the job waited behind
    the rest of the loop's work (other jobs, the system's own fetch and settle code on the loop, or a
    thread holding the GIL), taken inside the job, the same way for every system. The report is one
    pipelined round trip on the async client (never blocking the loop), plus two SETs for the first
    and last completion, as W1's mark_done.
    """
    global _asleep, _peak
    loop = asyncio.get_running_loop()
    body = os.environ.get("BENCH_W4_BODY", "sleep")
    _asleep += 1
    new_peak = _asleep > _peak
    if new_peak:
        _peak = _asleep
    before = loop.time()
    try:
        if body == "redis":
            await asyncio.sleep(0)
            lag_ms = (loop.time() - before) * 1000.0
            await aclient().incr(W4_INCR)
        else:
            await asyncio.sleep(W4_SLEEP_S)
            lag_ms = (loop.time() - before - W4_SLEEP_S) * 1000.0
    finally:
        _asleep -= 1
    now = time.time()
    pipe = aclient().pipeline(transaction=False)
    pipe.incr(DONE)
    pipe.hincrby(W4_RUNS, str(index), 1)
    pipe.rpush(W4_LAG, repr(lag_ms))
    pipe.hincrby(W4_PIDS, str(os.getpid()), 1)
    if new_peak:
        pipe.zadd(W4_PEAK, {str(os.getpid()): _peak}, gt=True)
    count = int((await pipe.execute())[0])
    if count == 1:
        await aclient().set(T_FIRST, repr(now))
    if count == int(os.environ.get("BENCH_TARGET", "0")):
        await aclient().set(T_LAST, repr(time.time()))
