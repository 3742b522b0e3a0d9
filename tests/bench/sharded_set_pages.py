"""A quick measure (not a timed test) of the Web UI's set pages in the sharded layout: a real 3-master
cluster, N entries in each of the retry, scheduled and dead sets spread over 7 queue partitions
(default=4, reports=2, mail=1), each page requested in-process (Starlette's TestClient: the app's
own time plus the ASGI round trip, no socket) and timed, p50 and p99.

    .venv/bin/python tests/bench/sharded_set_pages.py [entries per set, default 100000] [requests]

The figure goes in docs/sharding.md ("Retry, scheduled and dead sets")."""

from __future__ import annotations

import os
import random
import statistics
import sys
import time

from starlette.testclient import TestClient

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from cogworker import codec
from cogworker.ops import sets as set_ops
from cogworker.settings import load_settings
from cogworker.store import shards
from cogworker.web import create_app
from tests.support.redis_cluster import RedisCluster

QUEUES = {"default": 4, "reports": 2, "mail": 1}
PER_PAGE = 25


def seed(cluster: RedisCluster, count: int) -> dict[str, tuple[float, str]]:
    """`count` entries per set; answers one (score, jid) per set for the entry page."""
    client = cluster.cluster_client()
    parts = sorted(p for q, n in QUEUES.items() for p in shards.partitions(q, n))
    rng = random.Random(1)
    picked = {}
    now = time.time()
    for set_name in ("retry", "scheduled", "dead"):
        by_key: dict[str, dict[str, float]] = {}
        for i in range(count):
            p = parts[rng.randrange(len(parts))]
            jid = f"{set_name[0]}{i:07d}"
            job = {
                "class": "app.Report" if p.queue == "reports" else "app.Job",
                "queue": p.queue,
                "jid": jid,
                "args": [i, "some argument text"],
                "kwargs": {},
                "error_class": "RuntimeError",
                "error_message": "the upstream service answered 503",
                "failed_at": now - 3600,
                "retry_count": 3,
                "enqueued_at": now - 3600,
                "created_at": now - 7200,
            }
            score = now + rng.random() * 86400 if set_name != "dead" else now - rng.random() * 86400
            by_key.setdefault(set_ops.set_key(set_name, p), {})[codec.dumps(job)] = score
            if i == count // 2:
                picked[set_name] = (score, jid)
        for key, members in by_key.items():
            items = list(members.items())
            for start in range(0, len(items), 5000):
                client.zadd(key, dict(items[start : start + 5000]))
    for queue, n in QUEUES.items():
        client.sadd("cw:{home}:queues", queue)
        client.hset(shards.partitions_key(), queue, n)
    client.close()
    return picked


def timed(web: TestClient, path: str, runs: int) -> tuple[float, float]:
    web.get(path)  # warm: the first request makes the partition clients
    took = []
    for _ in range(runs):
        start = time.perf_counter()
        response = web.get(path)
        took.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200, (path, response.status_code)
    took.sort()
    return statistics.median(took), took[min(len(took) - 1, int(len(took) * 0.99))]


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    cluster = RedisCluster()
    try:
        os.environ.update(cluster.env(COGWORKER_KEY_PREFIX="cw:", COGWORKER_CLUSTER_SHARDING="queues"))
        os.environ["COGWORKER_QUEUE_PARTITIONS"] = ",".join(f"{q}={n}" for q, n in QUEUES.items())
        settings = load_settings()
        shards.use_settings(settings)
        started = time.perf_counter()
        picked = seed(cluster, count)
        took = time.perf_counter() - started
        print(f"seeded {count:,} entries in each set over 7 partitions in {took:.0f} s")
        last = (count + PER_PAGE - 1) // PER_PAGE
        pages = [
            "/retries",
            "/scheduled",
            "/dead",
            "/retries?page=2",
            f"/dead?page={last // 2}",
            f"/retries?page={last}",
            f"/scheduled?order=desc&page={last // 3}",
            "/retries?job=app.Report",
            "/dead?error=503",
            f"/retries/{set_ops.entry_key(*picked['retry'])}",
            f"/dead/{set_ops.entry_key(*picked['dead'])}",
            "/search?q=r0000123",
            f"/jobs/{picked['dead'][1]}",
        ]
        with TestClient(create_app(settings)) as web:
            print(f"{'page':45} {'p50 ms':>8} {'p99 ms':>8}")
            for path in pages:
                p50, p99 = timed(web, path, runs)
                print(f"{path[:45]:45} {p50:8.1f} {p99:8.1f}")
    finally:
        cluster.close()


if __name__ == "__main__":
    main()
