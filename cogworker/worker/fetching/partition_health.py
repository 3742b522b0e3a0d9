"""Partitions whose master is not answering, skipped by the sharded fetcher until it answers again.

A failed call to one partition's master (SlotUnavailable, a connection refused or timed out) must not
stop the fetcher thread from serving the other partitions. Trying that master again on every fetch
would cost each fetch the client timeout (COGWORKER_REDIS_TIMEOUT_S) while it is stopped, so the
partition is marked down and a probe thread of its own PINGs the partition's client every PROBE_S: the
first answer (from the master again, or from the replica promoted in its place, which the pinned client
finds by asking the cluster) puts it back in the rotation. The fetcher thread never waits on a master
it already knows is down.
"""

from __future__ import annotations

import threading
import time

import redis
import structlog

from cogworker.store.shard_clients import ShardClients
from cogworker.store.shards import Partition

log = structlog.get_logger("cogworker.fetch")

PROBE_S = 0.5


class PartitionHealth:
    def __init__(self, clients: ShardClients, probe_s: float = PROBE_S) -> None:
        self._clients = clients
        self._probe_s = probe_s
        self._lock = threading.Lock()
        self._down: dict[Partition, float] = {}  # partition -> when it went down (monotonic)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def is_down(self, partition: Partition) -> bool:
        return partition in self._down  # a dict read: no lock on the fetch path

    def failed(self, partition: Partition, exc: BaseException) -> None:
        with self._lock:
            if partition in self._down:
                return
            self._down[partition] = time.monotonic()
            start = self._thread is None
            if start:
                self._thread = threading.Thread(target=self._probe_loop, name="partition-probe", daemon=True)
        log.warning(
            "partition_unavailable",
            partition=str(partition),
            error=f"{type(exc).__name__}: {exc}",
            note="skipped until its master answers a probe; the other partitions are fetched meanwhile",
        )
        if start and self._thread is not None:
            self._thread.start()

    def _probe_loop(self) -> None:
        while not self._stop.wait(self._probe_s):
            with self._lock:
                down = list(self._down.items())
            for partition, since in down:
                try:
                    self._clients.of(partition).ping()
                except redis.RedisError:
                    continue  # still down: reported once, when it went down (`failed`)
                with self._lock:
                    self._down.pop(partition, None)
                log.info(
                    "partition_available", partition=str(partition), down_s=round(time.monotonic() - since, 3)
                )

    def close(self) -> None:
        self._stop.set()
