"""Chains on basic fetch (a server without LMOVE: the worker falls back to BRPOP, and a step is then on
no in-progress list, so chain_ack.lua has no list to take it off): each step still pushes the next,
results are still passed on, and a group in the middle still continues the chain once."""

from __future__ import annotations

import chain_jobs
import redis

import cogworker
from cogworker.settings import load_settings
from cogworker.store import keys
from tests.support.chains import APP, finished
from tests.support.redis_server import RedisServer, wait_until
from tests.support.workers import WorkerPool


def test_a_chain_with_a_group_runs_to_its_end_on_basic_fetch(workers: WorkerPool) -> None:
    server = RedisServer(extra=("--rename-command", "LMOVE", "", "--rename-command", "BLMOVE", ""))
    try:
        cogworker.configure(load_settings(redis_url=server.url))
        r = redis.Redis.from_url(server.url, decode_responses=True)
        # One queue: its idle wait is a BLMOVE, refused, so the worker is on basic fetch before the
        # first step is pushed.
        worker = workers.start(server.url, **APP)
        wait_until(lambda: worker.events_named("reliable_fetch_unsupported"), timeout=30, message="fallback")
        pushed = cogworker.chain(
            chain_jobs.first.s(1),
            cogworker.group(chain_jobs.second.s(1), chain_jobs.second.s(2)),
            chain_jobs.third.s(),
            pass_results=True,
        )
        assert pushed is not None
        status = finished(pushed.id)
        assert status["state"] == "complete"
        assert [s["state"] for s in status["steps"]] == ["done"] * 3
        seen = list(r.lrange("test:chain:runs", 0, -1))
        assert seen[0] == "first 1" and sorted(seen[1:3]) == ["second 10 1", "second 10 2"]
        assert seen[3:] == ["third [11, 12]"]  # once, after both members
        assert cogworker.result(pushed.jids[2], timeout=0) == {"total": [11, 12, 11, 12]}
        assert r.llen(keys.queue("default")) == 0
        # first, the two members, the group batch's callback (the chain step that pushes third), third
        assert r.get(keys.STAT_PROCESSED) == "5"
        worker.stop()
    finally:
        server.close()
