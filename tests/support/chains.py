"""What the chain e2e tests share (tests/e2e/worker/test_chains.py, test_chain_groups.py): the app's
environment, quick recovery settings, the runs the jobs recorded (tests/apps/chain_jobs.py), and a
wait for a chain's end."""

from __future__ import annotations

from typing import Any

import redis

import cogworker
from tests.support.redis_server import wait_until

APP = {"COGWORKER_REQUIRE": "chain_jobs", "COGWORKER_POLL_INTERVAL_S": "0.1", "COGWORKER_CONCURRENCY": "4"}


def runs(r: redis.Redis) -> list[str]:
    return list(r.lrange("test:chain:runs", 0, -1))


def finished(cid: str, timeout: float = 60) -> dict[str, Any]:
    """The chain's status once it is no longer running."""

    def ended() -> dict[str, Any] | None:
        status = cogworker.chain_status(cid)
        return status if status is not None and status["state"] != "running" else None

    found: dict[str, Any] = wait_until(ended, timeout=timeout, message=f"chain {cid} to end")
    return found
