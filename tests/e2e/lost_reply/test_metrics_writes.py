"""The lost-reply matrix for the per-class metrics (worker/metrics/flusher.py, api/deploy_marks.py):
a real `cogworker run` worker behind the RESP proxy, its metrics flush's reply lost after the script
ran, or the script never sent; and a deploy marker's write, either way. Afterwards the counts are
exact: a flush sent again is counted once, one that never ran is sent again, and a marker is one
member however often it was written."""

from __future__ import annotations

import json
from collections.abc import Iterator

import demo_jobs
import pytest

import cogworker
from cogworker.api import client as cw_client
from cogworker.settings import load_settings
from cogworker.store import metrics_layout as layout
from tests.support.matrix import MODES
from tests.support.metrics_store import summed
from tests.support.proxy_rules import Rule
from tests.support.redis_server import RedisServer, wait_until
from tests.support.resp_proxy import RespProxy
from tests.support.workers import WorkerPool, worker_pool

RECORD = "demo_jobs.record"


@pytest.fixture
def pool(resp_proxy: RespProxy, private_redis: RedisServer) -> Iterator[WorkerPool]:
    cw_client.configure(load_settings(redis_url=private_redis.url))
    yield from worker_pool(resp_proxy.url)


def arm(proxy: RespProxy, mode: str, **match: object) -> Rule:
    return proxy.lose_reply(**match) if mode == "lost" else proxy.drop_command(**match)


@pytest.mark.parametrize("mode", MODES)
def test_a_flush_is_counted_once(
    mode: str, pool: WorkerPool, resp_proxy: RespProxy, private_redis: RedisServer
) -> None:
    client = private_redis.client()
    # The first flush that carries job counts (its fields name the class).
    rule = arm(resp_proxy, mode, script="metrics_flush", arg=f"{RECORD}|p")
    worker = pool.start(COGWORKER_METRICS_FLUSH_S="0.2", COGWORKER_REDIS_TIMEOUT_S="2")
    for n in range(4):
        demo_jobs.record.perform_async(f"a{n}")
    resp_proxy.wait_fired(rule)
    wait_until(lambda: summed(client, "j").get(f"{RECORD}|p", 0) >= 4, message="the four runs written")
    # A flush after the fault: it goes after the resend of the faulted one, in order, so by the time
    # its runs are in, a resend that counted the first four again would show.
    for n in range(2):
        demo_jobs.record.perform_async(f"b{n}")
    wait_until(lambda: summed(client, "j").get(f"{RECORD}|p", 0) >= 6, message="the next two runs written")
    jobs = summed(client, "j")
    assert jobs[f"{RECORD}|p"] == 6
    assert sum(v for k, v in jobs.items() if k.startswith(f"{RECORD}|h")) == 6
    assert summed(client, "q")["default|n"] == 6
    assert worker.events_named("metrics_flush_failed"), "the fault was not met by the flusher"
    assert worker.events_named("metrics_flush_recovered")
    assert worker.stop() == 0
    assert summed(client, "j")[f"{RECORD}|p"] == 6


@pytest.mark.parametrize("mode", MODES)
def test_a_deploy_mark_is_one_marker(mode: str, resp_proxy: RespProxy, private_redis: RedisServer) -> None:
    cw_client.configure(load_settings(redis_url=resp_proxy.url, redis_timeout_s=2))
    rule = arm(resp_proxy, mode, script="deploy_mark", arg="v1.2")
    # Sent once more after the lost connection, with the same member: one marker either way.
    mark = cogworker.deploy_mark("v1.2", at=1_800_000_000.5, by="ci")
    resp_proxy.wait_fired(rule)
    assert mark == {"at": 1_800_000_000.5, "label": "v1.2", "by": "ci"}
    cogworker.deploy_mark("v1.2", at=1_800_000_000.5, by="ci")  # the caller's own retry: still one
    marks = private_redis.client().zrange(layout.marks_key(), 0, -1, withscores=True)
    assert marks == [(json.dumps(mark, separators=(",", ":")), 1_800_000_000.5)]
