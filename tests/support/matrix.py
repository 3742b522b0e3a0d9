"""What the lost-reply matrix's modules share (tests/e2e/lost_reply/): one Redis, the fault proxy in
front of it (tests/support/resp_proxy.py) and one `cogworker run` worker, for a whole module; and the
checks every case ends with. The worker's jobs (tests/apps/matrix_jobs.py) record their runs straight
in Redis, past the proxy, so no fault touches what the checks read."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import matrix_jobs
import redis

from cogworker.store import keys
from tests.support.proxy_rules import Rule
from tests.support.redis_server import RedisServer, wait_until
from tests.support.resp_proxy import RespProxy, cogworker_script_texts
from tests.support.workers import Worker, WorkerPool

MODES = ("lost", "dropped")
ENV = {
    "COGWORKER_REQUIRE": "matrix_jobs",
    # Two queues: an idle worker fetches with fetch.lua (one queue would wait in a BLMOVE).
    "COGWORKER_QUEUES": "default,other",
    "COGWORKER_CONCURRENCY": "2",
    "COGWORKER_REDIS_TIMEOUT_S": "2",
    "COGWORKER_POLL_INTERVAL_S": "0.1",
    "COGWORKER_ORPHAN_CHECK_INTERVAL_S": "0.5",
    "COGWORKER_HEARTBEAT_INTERVAL_S": "0.5",
    # A killed worker's jobs are recovered within seconds.
    "COGWORKER_PRESENCE_TTL_S": "1",
    "COGWORKER_ORPHAN_THRESHOLD_S": "2",
}


@dataclass
class Stack:
    server: RedisServer
    proxy: RespProxy
    worker: Worker
    workers: WorkerPool  # the module's worker, and any a case starts
    identity: str
    r: redis.Redis  # straight to Redis

    def arm(self, mode: str, **match: Any) -> Rule:
        """A lost reply ("lost") or a dropped command ("dropped") on the next matching command."""
        return self.proxy.lose_reply(**match) if mode == "lost" else self.proxy.drop_command(**match)

    def stat(self, name: str) -> int:
        return int(self.r.get(name) or 0)

    def ran(self, tag: str) -> int:
        return matrix_jobs.ran(self.r, tag)

    def callbacks(self, tag: str) -> int:
        return int(self.r.get(f"matrix:callback:{tag}") or 0)

    def dead_entries(self, text: str) -> list[dict[str, Any]]:
        return [json.loads(e) for e in self.r.zrange(keys.DEAD, 0, -1) if text in e]

    def notices(self, text: str) -> list[str]:
        return [n for n in self.r.lrange(keys.DEATHS, 0, -1) if text in n]

    def settled(self) -> bool:
        """Nothing on the worker's list, on a queue, scheduled, in retry; no unique claim left."""
        pipe = self.r.pipeline(transaction=False)
        pipe.llen(keys.in_progress(self.identity))
        pipe.llen(keys.queue("default"))
        pipe.llen(keys.queue("other"))
        pipe.zcard(keys.SCHEDULE)
        pipe.zcard(keys.RETRY)
        pipe.keys(keys.unique("*"))
        return not any(pipe.execute())

    def wait_ran(self, tag: str, times: int = 1) -> None:
        """`tag` ran `times` times, everything settled, and it ran no more than that."""
        wait_until(lambda: self.ran(tag) >= times, timeout=20, message=f"{tag} to run {times} time(s)")
        wait_until(self.settled, timeout=20, message="everything settled")
        assert self.ran(tag) == times

    def end_case(self) -> None:
        self.proxy.clear()
        assert self.worker.proc.poll() is None, self.worker.log_text()[-3000:]
        wait_until(self.settled, timeout=20, message="the worker idle, nothing left waiting")


@contextlib.contextmanager
def stack(*, worker_through_proxy: bool) -> Iterator[Stack]:
    """A module's Redis, proxy and worker; the worker talks through the proxy or straight to Redis."""
    server = RedisServer()
    # Every script's text as cogworker loads it, so the proxy names an EVALSHA of a script another
    # process (a worker straight on Redis) loaded.
    proxy = RespProxy(server.port, known_texts=cogworker_script_texts())
    pool = WorkerPool(proxy.url if worker_through_proxy else server.url)
    r = server.client()
    try:
        worker = pool.start(**ENV, MATRIX_RECORD_URL=server.url)
        yield Stack(server, proxy, worker, pool, worker.identity(), r)
    finally:
        proxy.clear()
        pool.close()
        r.close()
        proxy.close()
        server.close()
