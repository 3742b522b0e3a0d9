"""A batch through the sentinels: pushed from a fresh interpreter configured only by environment
variables, its members and then its callback run by a swarm that found the master through the
sentinels, so the batch scripts run on the master that Sentinel names."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.first_call import first_call
from tests.support.redis_server import wait_until
from tests.support.sentinel_redis import SentinelRedis
from tests.support.swarm import SwarmRunner

pytestmark = pytest.mark.slow

PUSH = """
import cogworker, sentinel_jobs
sink = {sink!r}
with cogworker.batch("through sentinels", on_success=sentinel_jobs.batch_done, callback_args=(sink,)) as b:
    for _ in range(3):
        sentinel_jobs.mark.perform_async(sink)
print(b.bid)
"""


def test_a_batch_pushed_through_the_sentinels_runs_its_members_then_its_callback_once(
    deployment: SentinelRedis, swarms: SwarmRunner, tmp_path: Path
) -> None:
    env = {**deployment.env(), "COGWORKER_REQUIRE": "sentinel_jobs", "COGWORKER_LOG_FORMAT": "json"}
    sink = tmp_path / "runs.txt"
    bid = first_call(PUSH.format(sink=str(sink)), deployment.url, timeout=60, **env)
    swarm = swarms.start(**env)

    def ran() -> list[list[str]]:
        return [line.split()[1:] for line in sink.read_text().splitlines()] if sink.exists() else []

    wait_until(lambda: ["callback", bid] in ran(), timeout=60, message="the batch's callback")
    assert swarm.stop() == 0
    assert len(ran()) == 4 and ran()[3] == ["callback", bid]  # after its three members, once
    assert len({jid for (jid,) in ran()[:3]}) == 3
