"""The part of a metrics scrape read from Redis: queue sizes, latencies and paused flags, and the
sizes of the retry, scheduled and dead sets.

Read at scrape time, on an HTTP handler thread (never the supervisor's loop), with a short timeout;
one read serves every scrape for a while, and a Redis that is down or slow makes `cogworker_redis_up`
0, never a failed scrape. The Redis client is imported here and only here in the supervisor, and only
with COGWORKER_METRICS_PORT set.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import redis
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cogworker import cluster_url, codec, redis_sentinel
from cogworker.ops import queues as queue_ops
from cogworker.ops import sets as set_ops
from cogworker.ops import stats
from cogworker.redis_tls import TlsSettings, client_options
from cogworker.store import sentinel_pool, shards
from cogworker.store.cluster_pool import cluster_client
from cogworker.store.connection import text_options
from cogworker.store.outage import Outages


@dataclass(frozen=True, slots=True)
class RedisReading:
    """What one scrape read from Redis; `queues` and `sets` are empty when Redis was unreadable."""

    up: bool
    queues: tuple[queue_ops.QueueInfo, ...] = ()
    sets: tuple[tuple[str, int], ...] = ()


class ScrapeSettings(TlsSettings, cluster_url.ClusterSettings, redis_sentinel.SentinelSettings, Protocol):
    """What the scrape reads: the supervisor's SwarmConfig (from the validated settings)."""

    @property
    def key_prefix(self) -> str: ...
    @property
    def cluster_sharding(self) -> str: ...
    @property
    def redis_sentinel_password(self) -> str: ...


class RedisCollector(Collector):
    """Queue sizes and latencies and the retry/scheduled/dead sizes, read when scraped.

    One read at a time, over one connection, and its result (an outage too) serves every scrape for
    `cache_s`: concurrent scrapes wait for the read in flight instead of each opening a connection.
    """

    def __init__(
        self,
        settings: ScrapeSettings,
        timeout_s: float,
        cache_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # The URL, the TLS files (a rediss:// URL's CA, client certificate and key), the sentinels.
        self._settings = settings
        self._timeout_s = timeout_s
        self._cache_s = cache_s
        self._clock = clock
        self._client: redis.Redis | None = None
        # Held during the Redis read (bounded by the socket timeout); nothing called under it takes it.
        self._lock = threading.Lock()
        self._reading: RedisReading | None = None
        self._read_at = 0.0
        self._outages = Outages()

    def _connection(self) -> redis.Redis:
        if self._client is None:
            options: dict[str, Any] = dict(
                socket_timeout=self._timeout_s,
                socket_connect_timeout=self._timeout_s,
                retry_on_timeout=False,
                retry=None,
                health_check_interval=0,
                # Reads are one at a time (the lock): a second connection would be a bug, not a need.
                max_connections=1,
                **client_options(self._settings),
                # Decoded as the workers decode: a payload or name that isn't UTF-8 can't fail it.
                **text_options(),
            )
            url = self._settings.redis_url
            target = redis_sentinel.target(self._settings)
            if cluster_url.is_cluster(self._settings):
                # Pinned to the master owning the deployment's slot, as every worker is; in the sharded
                # layout the home slot's, and the queue partitions' clients are derived from it
                # (store/fanout.py), with these same short timeouts.
                seeds = cluster_url.seeds(url)
                prefix = self._settings.key_prefix
                if self._settings.cluster_sharding == "queues":
                    prefix = shards.home_prefix(prefix)
                self._client = cluster_client(seeds, prefix, **options)
            elif target is not None:
                password = self._settings.redis_sentinel_password
                self._client = sentinel_pool.client(target, password, **options)
            else:
                self._client = redis.Redis.from_url(url, **options)
        return self._client

    def reading(self) -> RedisReading:
        with self._lock:
            now = self._clock()
            if self._reading is None or now - self._read_at >= self._cache_s:
                self._reading = self._read()
                self._read_at = self._clock()
            return self._reading

    def _read(self) -> RedisReading:
        try:
            client = self._connection()
            infos = queue_ops.queue_infos(client)
            if shards.is_sharded():
                # Summed over the home slot and every queue partition (one fan-out).
                found = stats.job_set_sizes(client)
                sizes = tuple((name, found[name]) for name in set_ops.SETS)
            else:
                pipe = client.pipeline(transaction=False)
                for name in set_ops.SETS:
                    pipe.zcard(set_ops.set_key(name))
                sizes = tuple((name, int(n)) for name, n in zip(set_ops.SETS, pipe.execute(), strict=True))
        except Exception as exc:
            # Never a failed scrape: redis_up says 0, and the log says so once per outage.
            self._outages.report("Metrics scrape", exc)
            return RedisReading(up=False)
        self._outages.recovered("Metrics scrape")
        return RedisReading(up=True, queues=tuple(infos), sets=sizes)

    def describe(self) -> Iterable[Metric]:
        # Without it, registering the collector (auto_describe) would read Redis, and that reading
        # would then be served, stale, to the first scrapes.
        return redis_families(RedisReading(up=True))

    def collect(self) -> Iterable[Metric]:
        return redis_families(self.reading())


def redis_families(reading: RedisReading) -> Iterable[Metric]:
    """cogworker_redis_up and, when Redis was read, the queue and set gauges."""
    up = GaugeMetricFamily("cogworker_redis_up", "1 when the scrape could read queues from Redis.")
    up.add_metric([], 1 if reading.up else 0)
    yield up
    if not reading.up:
        return
    size = GaugeMetricFamily("cogworker_queue_size", "Jobs waiting in the queue.", labels=["queue"])
    latency = GaugeMetricFamily(
        "cogworker_queue_latency_seconds",
        "How long the job popped next has waited (0 when the queue is empty).",
        labels=["queue"],
    )
    paused = GaugeMetricFamily("cogworker_queue_paused", "1 when the queue is paused.", labels=["queue"])
    for info in reading.queues:
        # A queue name that isn't UTF-8 (pushed by something else) is shown escaped: the exposition
        # format is UTF-8, and a lone surrogate in a label would fail the whole scrape.
        name = codec.escape(info.name)
        size.add_metric([name], info.size)
        latency.add_metric([name], info.latency_s or 0.0)
        paused.add_metric([name], 1 if info.paused else 0)
    sets = GaugeMetricFamily(
        "cogworker_set_size", "Entries in the retry, scheduled and dead sets.", labels=["set"]
    )
    for name, n in reading.sets:
        sets.add_metric([name], n)
    yield from (size, latency, paused, sets)
