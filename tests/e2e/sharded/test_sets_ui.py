"""The CLI's set verbs and cancel, and the Web UI's set, search and job pages, in the sharded layout on
a real 3-master cluster: entries in several queue partitions listed as one, and acted on where they are."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest
import redis
from starlette.testclient import TestClient

from cogworker import codec
from cogworker import settings as settings_module
from cogworker.ops import sets as set_ops
from cogworker.store import shards
from cogworker.web import create_app
from tests.e2e.sharded.sets_support import QUEUES, every_partition, one_slot, payload
from tests.support.cli_runner import CLI
from tests.support.web_requests import SAME_ORIGIN

PARTITIONS = ",".join(f"{q}={n}" for q, n in QUEUES.items())
# Recent: a kill trims dead entries older than COGWORKER_DEAD_TIMEOUT_S.
T0 = float(int(time.time()) - 3600)


@pytest.fixture
def sharded(
    env: dict[str, str], cluster: redis.RedisCluster, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    monkeypatch.setenv("COGWORKER_QUEUE_PARTITIONS", PARTITIONS)
    shards.use_settings(settings_module.load_settings())
    for queue, n in QUEUES.items():
        cluster.sadd("cw:{home}:queues", queue)
        cluster.hset(shards.partitions_key(), queue, n)
    yield
    one_slot()


@pytest.fixture
def cli(sharded: None, capsys: pytest.CaptureFixture[str]) -> CLI:
    return CLI(capsys)


@pytest.fixture
def web(sharded: None) -> Iterator[TestClient]:
    with TestClient(create_app(settings_module.load_settings()), follow_redirects=True) as client:
        yield client


def spread(cluster: redis.RedisCluster, set_name: str, count: int) -> list[str]:
    """`count` entries, round robin over every partition, scored T0+i: answers the jids by score."""
    parts = every_partition()
    jids = []
    for i in range(count):
        p = parts[i % len(parts)]
        jid = f"e{i:03d}"
        cluster.zadd(set_ops.set_key(set_name, p), {payload(jid, p.queue): T0 + i})
        jids.append(jid)
    return jids


def test_the_cli_lists_every_partition_and_acts_where_the_entry_is(
    cli: CLI, cluster: redis.RedisCluster
) -> None:
    jids = spread(cluster, "dead", 30)
    listing = cli("dead", "list", "--json", "--limit", "10").json()
    assert listing["size"] == 30
    assert [e["jid"] for e in listing["entries"]] == jids[::-1][:10]  # newest death first
    parts = every_partition()
    assert [e["partition"] for e in listing["entries"]] == [
        str(parts[i % len(parts)]) for i in range(29, 19, -1)
    ]
    text = cli("dead", "list", "--limit", "3").out
    assert "PARTITION" in text
    assert re.search(rf"^e029 +app\.Job +default +{re.escape(str(parts[29 % len(parts)]))} ", text, re.M)
    retried = cli("dead", "retry", "e007")
    assert retried.code == 0, retried.err
    p = every_partition()[7 % len(every_partition())]
    assert [codec.loads_dict(x)["jid"] for x in cluster.lrange(shards.queue_key(p), 0, -1)] == ["e007"]  # type: ignore[index]
    again = cli("dead", "retry", "e007")
    assert again.code == 1 and "no job e007 in the dead set" in again.err
    assert cli("dead", "delete", "e008", "--yes").code == 0
    assert cli("dead", "list", "--json").json()["size"] == 28

    spread(cluster, "scheduled", 5)
    killed = cli("scheduled", "kill", "e003", "--yes")
    assert killed.code == 0, killed.err
    q = every_partition()[3]
    # e003, e010, e017 and e024 of the dead set's seeding, and the one killed.
    assert cluster.zcard(shards.dead(q)) == 5

    cancelled = cli("cancel", "e004", "--json")
    assert cancelled.code == 0, cancelled.err
    assert cancelled.json()["case"] == "scheduled"
    assert cli("scheduled", "list", "--json").json()["size"] == 3


def test_the_web_pages_list_every_partition_and_act_where_the_entry_is(
    web: TestClient, cluster: redis.RedisCluster
) -> None:
    jids = spread(cluster, "retry", 60)
    first = web.get("/retries").text
    shown = re.findall(r'<tr data-jid="([^"]+)"', first)
    assert shown == jids[: len(shown)] and len(shown) == 25  # soonest due first
    assert "60" in first
    second = re.findall(r'<tr data-jid="([^"]+)"', web.get("/retries?page=2").text)
    assert second == jids[25:50]
    key = set_ops.entry_key(T0 + 41, "e041")
    entry_page = web.get(f"/retries/{key}").text
    assert "e041" in entry_page
    assert (
        f"<dt>partition</dt><dd><code>{every_partition()[41 % len(every_partition())]}</code>" in entry_page
    )
    done = web.post("/retries/retry", data={"key": key, "back": "/retries"}, headers=SAME_ORIGIN).text
    assert "Retried job e041" in done
    late = web.post("/retries/retry", data={"key": key, "back": "/retries"}, headers=SAME_ORIGIN).text
    assert "already gone" in late
    p = every_partition()[41 % len(every_partition())]
    assert cluster.llen(shards.queue_key(p)) == 1
    filtered = re.findall(r'<tr data-jid="([^"]+)"', web.get("/retries?job=app.Report").text)
    assert filtered and all(
        int(j[1:]) % len(every_partition()) in (5, 6) for j in filtered
    )  # the reports partitions
    groups = web.get("/retries/groups").text
    assert "app.Report" in groups and "app.Job" in groups
    found = web.get("/search?q=e05").text
    assert sorted(set(re.findall(r'data-jid="(e05\d)"', found))) == [f"e05{i}" for i in range(10)]
    job = web.get("/jobs/e041").text
    assert "queued" in job and p.queue in job


def test_the_web_bulk_actions_cover_every_partition(web: TestClient, cluster: redis.RedisCluster) -> None:
    spread(cluster, "retry", 21)
    listing = web.get("/retries").text
    assert 'name="count" value="21"' in listing
    form = {"job": "app.Report", "count": "21", "back": "/retries?job=app.Report", "confirm": "yes"}
    done = web.post("/retries/kill-all", data=form, headers=SAME_ORIGIN).text
    # Entries 5, 6, 12, 13, 19, 20 fall in the reports partitions (sorted 6th and 7th).
    assert "Killed 6 entries to dead" in done
    assert sum(cluster.zcard(shards.dead(p)) for p in every_partition()) == 6
    retried = web.post("/retries/retry-all", data={"confirm": "yes", "back": "/retries"}, headers=SAME_ORIGIN)
    assert "Retried 15 entries onto their queues" in retried.text
    assert sum(cluster.llen(shards.queue_key(p)) for p in every_partition()) == 15
    cleared = web.post("/dead/delete-all", data={"confirm": "yes", "back": "/dead"}, headers=SAME_ORIGIN)
    assert "Deleted 6 entries from the dead set" in cleared.text
    assert sum(cluster.zcard(shards.dead(p)) for p in every_partition()) == 0
