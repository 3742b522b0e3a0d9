"""One Sentinel failover under load, measured (tests/e2e/sentinel/test_sentinel_failover.py).

A producer thread pushes jobs (sentinel_jobs.mark) through cogworker's client in small bulk pushes
at a steady PUSH_RATE, faster than the swarm runs them (so a backlog stands when the master dies,
and the swarm's speed after the failover is its own, not the producer's), keeping the jid of every
job whose push RETURNED; a push that raises is counted and the producer goes on (the jobs it tried
may or may not be in Redis). A 2-child swarm runs them; each run appends `<time> <jid>`
to a sink file, outside Redis. Halfway through the pushes, the master is SIGKILLed; the sentinels
promote the replica; the killed node is started again, empty, as the new master's replica. When
every job Redis still holds has run:

- lost: jids whose push returned that never ran;
- twice: jids that ran more than once;
- back to full speed: from the promotion (read from the sentinels) to the end of the first 2 s
  window whose run rate is at least half the rate of the 3 s before the kill.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import redis

import cogworker
from cogworker.api import client as cw_client
from cogworker.settings import load_settings
from cogworker.store import keys
from tests.support.redis_server import wait_until
from tests.support.sentinel_redis import SENTINEL_PASSWORD, SentinelRedis
from tests.support.swarm import SwarmRunner

JOBS = 20_000
PUSH_RATE = 1_500  # jobs/s; the swarm runs ~700/s here
BATCH = 20
# The kill comes mid-push and mid-run: the producer is half done, the swarm has run a few thousand.
KILL_AFTER_PUSHES = 10_000
KILL_AFTER_RUNS = 2_000
PAUSE_MS = 8  # per job: with 2 children x 4 threads the swarm, not the producer, sets the pace
WINDOW_S = 2.0
BEFORE_S = 3.0
FULL_SPEED_SHARE = 0.5


@dataclass
class Producer:
    sink: str
    target: int
    returned: list[str] = field(default_factory=list)
    raised: Counter[str] = field(default_factory=Counter)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        import sentinel_jobs

        next_at = time.monotonic()
        while len(self.returned) < self.target and not self.stop.is_set():
            # Pacing, not synchronisation: a steady rate, and no spinning while Redis is away.
            self.stop.wait(max(0.0, next_at - time.monotonic()))
            next_at = max(next_at, time.monotonic() - 1.0) + BATCH / PUSH_RATE
            try:
                jids = cogworker.push_bulk(sentinel_jobs.mark, [(self.sink, PAUSE_MS)] * BATCH)
            except Exception as exc:  # the outage, or NotReplicated: counted as not returned
                self.raised[type(exc).__name__] += 1
                continue
            self.returned.extend(str(jid) for jid in jids)


@dataclass
class Figures:
    min_replicas: int
    returned: int
    raised: dict[str, int]
    ran: int
    lost: int
    twice: int
    kill_to_promotion_s: float
    rate_before: float
    full_speed_after_s: float | None

    def line(self) -> str:
        return (
            f"MIN_REPLICAS={self.min_replicas}: {self.returned} jobs pushed and returned (bulk pushes "
            f"of {BATCH} that raised: {self.raised}), {self.ran} jobs ran, lost {self.lost}, "
            f"ran twice {self.twice}; "
            f"promotion {self.kill_to_promotion_s:.1f} s after the kill; {self.rate_before:.0f} jobs/s "
            f"before, back to half of it {self.full_speed_after_s} s after the promotion"
        )


def runs(sink: Path) -> list[tuple[float, str]]:
    if not sink.exists():
        return []
    found = []
    for line in sink.read_text().splitlines():
        stamp, _, jid = line.partition(" ")
        if jid:
            found.append((float(stamp), jid))
    return found


def settled(deployment: SentinelRedis) -> bool:
    """Nothing left in Redis to run: the queue, the retry/schedule sets and every in-progress list empty."""
    port = deployment.master_port_now()
    if port is None:
        return False
    node = deployment.node(port)
    try:
        if node.llen(keys.queue("default")) or node.zcard(keys.RETRY) or node.zcard(keys.SCHEDULE):
            return False
        return not any(node.llen(k) for k in node.scan_iter(match=keys.IN_PROGRESS_PREFIX + "*"))
    except redis.RedisError:
        return False


def full_speed_after(stamps: list[float], promoted_at: float, rate_before: float) -> float | None:
    """Seconds from the promotion to the end of the first WINDOW_S window (stepping 0.1 s) whose run
    rate is at least FULL_SPEED_SHARE of `rate_before`."""
    start = promoted_at
    while start < promoted_at + 60:
        n = sum(1 for t in stamps if start <= t < start + WINDOW_S)
        if n / WINDOW_S >= FULL_SPEED_SHARE * rate_before:
            return round(start + WINDOW_S - promoted_at, 1)
        start += 0.1
    return None


def run_failover(
    deployment: SentinelRedis, swarms: SwarmRunner, tmp_path: Path, min_replicas: int
) -> Figures:
    sink = tmp_path / "runs.txt"
    env = {
        **deployment.env(),
        "COGWORKER_REQUIRE": "sentinel_jobs",
        "COGWORKER_CONCURRENCY": "4",
        "COGWORKER_REDIS_MIN_REPLICAS": str(min_replicas),
        "COGWORKER_REDIS_TIMEOUT_S": "2",
    }
    swarm = swarms.start(**env)
    swarm.wait_ready(timeout=60)
    cw_client.configure(
        load_settings(
            redis_url=deployment.url,
            redis_sentinel_password=SENTINEL_PASSWORD,
            redis_min_replicas=min_replicas,
            redis_timeout_s=2,
        )
    )
    producer = Producer(str(sink), JOBS)
    thread = threading.Thread(target=producer.run, daemon=True)
    thread.start()
    try:
        wait_until(
            lambda: len(producer.returned) >= KILL_AFTER_PUSHES and len(runs(sink)) >= KILL_AFTER_RUNS,
            timeout=120,
            interval=0.005,
            message="pushes and runs before the kill",
        )
        killed_at = time.time()
        old = deployment.kill_master()
        promoted_at = deployment.wait_promoted(old)
        deployment.restart(old, replica_of=deployment.master_port_now() or 0)
        thread.join(timeout=180)
        assert not thread.is_alive(), "the producer did not finish"
        wait_until(lambda: settled(deployment), timeout=120, interval=0.2, message="every job run")
    finally:
        producer.stop.set()
        thread.join(timeout=10)
    assert swarm.proc.poll() is None, swarm.tail()
    swarm.stop(timeout=60)
    recorded = runs(sink)
    counts = Counter(jid for _, jid in recorded)
    stamps = [t for t, _ in recorded]
    rate_before = sum(1 for t in stamps if killed_at - BEFORE_S <= t < killed_at) / BEFORE_S
    return Figures(
        min_replicas=min_replicas,
        returned=len(producer.returned),
        raised=dict(producer.raised),
        ran=len(counts),
        lost=len(set(producer.returned) - set(counts)),
        twice=sum(1 for n in counts.values() if n > 1),
        kill_to_promotion_s=round(promoted_at - killed_at, 2),
        rate_before=rate_before,
        full_speed_after_s=full_speed_after(stamps, promoted_at, rate_before),
    )
