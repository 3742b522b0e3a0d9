"""Status, pause and counters with a real sharded worker (h39-push and h39-worker merged to test both
ends): a paused partitioned queue keeps its jobs in every partition while the worker serves another
queue, resume lets them all run, and `cogworker status` sums the worker's counters over the partitions."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import sharded_jobs

from cogworker.cli.main import main
from cogworker.store import shards
from tests.e2e.sharded.conftest import sharded_env
from tests.e2e.sharded.pushing import configured_api
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import wait_until
from tests.support.workers import WorkerPool

PARTITIONS = "default=3"


@pytest.fixture
def api(env: dict[str, str], cluster: redis.RedisCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with configured_api(monkeypatch, COGWORKER_QUEUE_PARTITIONS=PARTITIONS):
        yield


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object] | list[object]:
    capsys.readouterr()
    assert main([*argv, "--json"]) == 0
    found: dict[str, object] | list[object] = json.loads(capsys.readouterr().out)
    return found


def test_pause_holds_every_partition_and_status_sums_what_ran(
    api: None,
    workers: WorkerPool,
    redis_cluster: RedisCluster,
    cluster: redis.RedisCluster,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "events"
    out.touch()
    tags = [f"p{n}" for n in range(12)]
    for tag in tags:
        sharded_jobs.mark.perform_async(tag)
    held = [len(cluster.lrange(shards.queue_key(shards.Partition("default", i)), 0, -1)) for i in range(3)]
    assert sum(held) == 12 and all(held), held  # spread over the three partitions
    queues = cli(capsys, "queues")
    assert isinstance(queues, list)
    assert {q["name"]: q["size"] for q in queues} == {"default": 12}  # type: ignore[index]
    assert cli(capsys, "queue", "pause", "default") == {"queue": "default", "paused": True, "changed": True}

    env = sharded_env(
        redis_cluster,
        COGWORKER_REQUIRE="sharded_jobs",
        COGWORKER_QUEUE_PARTITIONS=PARTITIONS,
        COGWORKER_QUEUES="default,other",
        SHARDED_TEST_OUT=str(out),
    )
    workers.start(env.pop("COGWORKER_REDIS_URL"), **env)

    def ran() -> Counter[str]:
        return Counter(line.split()[1] for line in out.read_text().splitlines() if line.startswith("ran "))

    # The worker reads `default` first: once a job of `other` ran, it had looked at every partition of
    # `default` and taken nothing from any of them.
    sharded_jobs.mark.set(queue="other").perform_async("other")
    wait_until(lambda: ran()["other"] == 1, timeout=60, message="the unpaused queue's job ran")
    assert sum(ran().values()) == 1
    status = cli(capsys, "status")
    assert isinstance(status, dict)
    sizes = {q["name"]: (q["size"], q["paused"]) for q in status["queues"]}  # type: ignore[attr-defined]
    assert sizes["default"] == (12, True)
    assert len(status["processes"]) == 1  # type: ignore[arg-type]

    assert cli(capsys, "queue", "resume", "default") == {"queue": "default", "paused": False, "changed": True}
    wait_until(lambda: sum(ran().values()) == 13, timeout=60, message="every held job ran after resume")
    assert ran() == Counter([*tags, "other"])

    def counted() -> dict[str, object]:
        found = cli(capsys, "status")
        assert isinstance(found, dict)
        return found

    # Each ack counts in its job's partition; status sums them (and the queue is empty again).
    final = wait_until(lambda: (s := counted())["processed"] == 13 and s, timeout=30, message="13 counted")
    assert {q["name"]: q["size"] for q in final["queues"]} == {"default": 0, "other": 0}  # type: ignore[attr-defined]
    assert final["failed"] == 0
