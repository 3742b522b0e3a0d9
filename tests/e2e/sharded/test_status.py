"""The whole-deployment reads and the queue actions in the sharded layout, on a real 3-master cluster:
counters summed over partitions, queue sizes summed in `cogworker queues` / `status` / the Web UI,
pause and resume writing every partition's flag, what a process holds over its partitions.

State is seeded with redis-py's own cluster client, as the workers' scripts would leave it."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
import redis
from redis.crc import key_slot
from starlette.testclient import TestClient

import cogworker
from cogworker import codec
from cogworker import settings as settings_module
from cogworker.cli.main import main
from cogworker.ops import NotFound, stats
from cogworker.ops import processes as process_ops
from cogworker.ops import queues as queue_ops
from cogworker.store import connection, fanout, keys, shards
from cogworker.web import create_app
from tests.e2e.sharded.pushing import configured_api
from tests.support.redis_cluster import RedisCluster
from tests.support.web_requests import SAME_ORIGIN

DAY = stats.today()


@pytest.fixture
def home(env: dict[str, str], cluster: redis.RedisCluster) -> Iterator[redis.Redis]:
    """The deployment's own client (the home slot's), with `reports` split over 3 partitions."""
    loaded = settings_module.load_settings()
    shards.use_settings(loaded)
    client = connection.connect(loaded)
    yield client
    client.close()


def job(queue: str, jid: str, enqueued_at: float) -> str:
    return codec.dumps(
        {"class": "app.Job", "jid": jid, "queue": queue, "args": [1], "enqueued_at": enqueued_at}
    )


def seed_queue(cluster: redis.RedisCluster, queue: str, sizes: list[int], oldest: list[float]) -> None:
    """Partition i of `queue` gets sizes[i] jobs, the one popped next enqueued at oldest[i]."""
    cluster.sadd(keys.QUEUES, queue)
    cluster.hset(shards.partitions_key(), queue, len(sizes))
    for index, (size, stamp) in enumerate(zip(sizes, oldest, strict=True)):
        key = shards.queue_key(shards.Partition(queue, index))
        for n in range(size):
            # LPUSH: the first pushed ends up at the right end, the next popped.
            cluster.lpush(key, job(queue, f"{queue}-{index}-{n}", stamp + n))


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(list(argv))
    return code, capsys.readouterr().out


def test_counters_are_summed_over_every_partition_and_the_home_slot(
    home: redis.Redis, cluster: redis.RedisCluster
) -> None:
    seed_queue(cluster, "default", [0], [0.0])
    seed_queue(cluster, "reports", [0, 0, 0], [0.0, 0.0, 0.0])
    for index, (processed, failed) in enumerate([(5, 1), (7, 0), (11, 2)]):
        p = shards.Partition("reports", index)
        cluster.set(shards.stat(p, "processed"), processed)
        cluster.set(shards.stat(p, "failed"), failed)
        cluster.set(shards.stat_day(p, "processed", DAY), processed)
        cluster.set(shards.stat_day(p, "failed", DAY), failed)
        cluster.set(shards.stat(p, "expired"), 1)
    default = shards.Partition("default", 0)
    cluster.set(shards.stat(default, "processed"), 100)
    cluster.set(keys.STAT_PROCESSED, 1000)  # anything counted in the home slot counts too
    totals = stats.totals(home)
    assert (totals.processed, totals.failed) == (1123, 3)
    assert (totals.processed_today, totals.failed_today) == (23, 3)
    assert totals.ended["expired"] == (3, 0)
    today = stats.history(home, 7)[-1]
    assert (today.day, today.processed, today.failed) == (DAY, 23, 3)


def test_queue_sizes_latency_and_listing_are_summed_over_partitions(
    home: redis.Redis, cluster: redis.RedisCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    now = time.time()
    seed_queue(cluster, "reports", [2, 3, 4], [now - 10, now - 40, now - 20])
    seed_queue(cluster, "default", [1], [now - 5])
    infos = {q.name: q for q in queue_ops.queue_infos(home, now=now)}
    assert (infos["reports"].size, infos["default"].size) == (9, 1)
    # The longest wait at any partition's right end.
    assert infos["reports"].latency_s == pytest.approx(40, abs=1)
    assert queue_ops.size(home, "reports") == 9
    code, out = run_cli(capsys, "queues", "--json")
    assert code == 0
    assert {q["name"]: q["size"] for q in json.loads(out)} == {"default": 1, "reports": 9}
    code, out = run_cli(capsys, "status", "--json")
    assert code == 0
    assert {q["name"]: q["size"] for q in json.loads(out)["queues"]} == {"default": 1, "reports": 9}


def test_a_recorded_count_above_the_configured_one_is_still_read(
    home: redis.Redis, cluster: redis.RedisCluster
) -> None:
    """A lowered COGWORKER_QUEUE_PARTITIONS: the partitions pushed to before still count (and drain)."""
    seed_queue(cluster, "default", [1, 1, 1, 1], [1.0, 1.0, 1.0, 1.0])
    assert shards.configured_count("default") == 1
    [info] = queue_ops.queue_infos(home, ["default"])
    assert info.size == 4


def test_pause_writes_every_partitions_flag_and_resume_clears_them(
    home: redis.Redis, cluster: redis.RedisCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    seed_queue(cluster, "reports", [1, 0, 1], [1.0, 1.0, 1.0])
    flags = [shards.paused(shards.Partition("reports", i)) for i in range(3)]
    code, out = run_cli(capsys, "queue", "pause", "reports", "--json")
    assert (code, json.loads(out)["changed"]) == (0, True)
    assert [cluster.smembers(flag) for flag in flags] == [{"reports"}] * 3
    assert cluster.smembers(keys.PAUSED) == {"reports"}
    # Sent again (a reply lost after it ran): nothing changes, and it says so.
    code, out = run_cli(capsys, "queue", "pause", "reports", "--json")
    assert (code, json.loads(out)["changed"]) == (0, False)
    assert [cluster.smembers(flag) for flag in flags] == [{"reports"}] * 3
    assert queue_ops.paused_queues(home) == {"reports"}
    [info] = queue_ops.queue_infos(home, ["reports"])
    assert info.paused
    # A pause cut short (one partition not yet written) shows as paused, and a second pause completes it.
    cluster.srem(flags[1], "reports")
    assert queue_ops.pause(home, "reports") is True
    assert cluster.smembers(flags[1]) == {"reports"}

    code, out = run_cli(capsys, "queue", "resume", "reports", "--json")
    assert (code, json.loads(out)["changed"]) == (0, True)
    assert [cluster.exists(flag) for flag in flags] == [0, 0, 0]
    assert cluster.smembers(keys.PAUSED) == set()
    code, out = run_cli(capsys, "queue", "resume", "reports", "--json")
    assert (code, json.loads(out)["changed"]) == (0, False)
    assert queue_ops.paused_queues(home) == set()


def test_a_pause_one_partition_refused_is_completed_by_sending_it_again(
    home: redis.Redis, cluster: redis.RedisCluster
) -> None:
    """The write never ran on one partition (its flag key refused it): the others are paused, the
    error reaches the operator, and the same pause sent again writes the one left."""
    seed_queue(cluster, "reports", [0, 0, 0], [1.0, 1.0, 1.0])
    flags = [shards.paused(shards.Partition("reports", i)) for i in range(3)]
    cluster.set(flags[2], "in the way")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        queue_ops.pause(home, "reports")
    assert [cluster.sismember(flag, "reports") for flag in flags[:2]] == [1, 1]
    cluster.delete(flags[2])  # the key guard's work (tests/e2e/sharded/test_doctor.py)
    assert queue_ops.pause(home, "reports") is True
    assert [cluster.smembers(flag) for flag in flags] == [{"reports"}] * 3
    assert queue_ops.pause(home, "reports") is False


def test_clear_empties_every_partition(home: redis.Redis, cluster: redis.RedisCluster) -> None:
    seed_queue(cluster, "reports", [2, 3, 1], [1.0, 1.0, 1.0])
    suspects = shards.suspects(shards.Partition("reports", 2))
    cluster.lpush(suspects, job("reports", "s1", 1.0))
    assert queue_ops.size(home, "reports") == 7
    assert queue_ops.clear(home, "reports") == 7
    assert queue_ops.size(home, "reports") == 0
    assert queue_ops.clear(home, "reports") == 0  # sent again: nothing more to delete
    assert "reports" not in cluster.smembers(keys.QUEUES)


def test_a_page_of_jobs_reads_the_partitions_in_turn_and_deletes_from_the_right_one(
    home: redis.Redis, cluster: redis.RedisCluster
) -> None:
    seed_queue(cluster, "reports", [2, 0, 3], [1.0, 1.0, 1.0])
    page = queue_ops.jobs_page(home, "reports", 0, 10)
    assert [(j.partition, j.jid) for j in page] == [
        (0, "reports-0-1"),
        (0, "reports-0-0"),
        (2, "reports-2-2"),
        (2, "reports-2-1"),
        (2, "reports-2-0"),
    ]
    assert [(j.partition, j.index) for j in queue_ops.jobs_page(home, "reports", 1, 2)] == [(0, 1), (2, 0)]
    following = queue_ops.jobs_page(home, "reports", 0, 3, next_first=True)
    assert [j.jid for j in following] == ["reports-0-0", "reports-0-1", "reports-2-0"]
    assert [j.index for j in following] == [1, 0, 2]
    target = page[3]
    deleted = queue_ops.delete_job(home, "reports", str(target.jid), target.index, target.partition)
    assert deleted.jid == "reports-2-1"
    assert cluster.llen(shards.queue_key(shards.Partition("reports", 2))) == 2
    with pytest.raises(NotFound):
        queue_ops.delete_job(home, "reports", str(target.jid), target.index, target.partition)


def test_reads_and_a_pause_follow_a_slot_that_moved_since_the_map_was_read(
    home: redis.Redis, cluster: redis.RedisCluster, redis_cluster: RedisCluster
) -> None:
    """A fan-out groups partitions by master from a slot map it keeps: a slot migrated since answers
    MOVED (not run), and those partitions are sent again through their slots' own clients."""
    seed_queue(cluster, "reports", [2, 3], [1.0, 1.0])
    assert queue_ops.size(home, "reports") == 5  # the map is read and kept
    routes = fanout.clients_of(home).routes
    slot = key_slot(b"reports#1")
    source, target = redis_cluster.migrate(slot)
    assert routes.owner(slot) == f"127.0.0.1:{source}"  # stale
    [info] = queue_ops.queue_infos(home, ["reports"])
    assert info.size == 5
    assert routes.owner(slot) == f"127.0.0.1:{target}"  # the MOVED made it read the map again
    assert queue_ops.pause(home, "reports") is True
    assert [cluster.smembers(shards.paused(shards.Partition("reports", i))) for i in range(2)] == [
        {"reports"}
    ] * 2
    assert stats.totals(home).processed == 0


def presence(cluster: redis.RedisCluster, identity: str, queues: list[str]) -> None:
    info = {"hostname": "h", "pid": 1, "queues": queues, "concurrency": 5, "started_at": time.time()}
    cluster.sadd(keys.PROCESSES, identity)
    cluster.hset(keys.process(identity), mapping={"info": json.dumps(info), "busy": 1, "beat": time.time()})


def test_what_a_process_holds_is_summed_over_its_partitions(
    home: redis.Redis, cluster: redis.RedisCluster
) -> None:
    seed_queue(cluster, "reports", [0, 0, 0], [1.0, 1.0, 1.0])
    presence(cluster, "host:1:aa", ["reports", "default"])
    for index, held in enumerate([1, 0, 2]):
        for n in range(held):
            cluster.lpush(shards.in_progress(shards.Partition("reports", index), "host:1:aa"), f"j{n}")
    cluster.lpush(shards.in_progress(shards.Partition("default", 0), "host:1:aa"), "j")
    [process] = process_ops.processes(home)
    assert process.in_progress == 4
    # A process that is gone: its lists in every known partition are counted as orphaned.
    dead = "host:2:bb"
    cluster.sadd(keys.IN_PROGRESS_IDENTITIES, dead)
    cluster.lpush(shards.in_progress(shards.Partition("reports", 2), dead), "x", "y")
    cluster.lpush(shards.in_progress(shards.Partition("default", 0), dead), "z")
    cluster.zadd(keys.LIVE_QUEUES, {"default": time.time()})  # read lately, never pushed to
    [orphaned] = process_ops.orphaned_lists(home)
    assert (orphaned.identity, orphaned.size) == (dead, 3)


def test_the_web_ui_dashboard_and_queues_page_show_the_sums(
    home: redis.Redis, cluster: redis.RedisCluster
) -> None:
    now = time.time()
    seed_queue(cluster, "reports", [2, 3, 4], [now - 10, now - 40, now - 20])
    seed_queue(cluster, "default", [1], [now - 5])
    for index, n in enumerate([3, 4, 5]):
        p = shards.Partition("reports", index)
        cluster.set(shards.stat(p, "processed"), 1000 * n)
        cluster.zadd(shards.retry(p), {f"r{index}-{i}": float(i) for i in range(n)})
    cluster.zadd(shards.dead(shards.Partition("default", 0)), {"d": 1.0})
    settings = settings_module.load_settings()
    with TestClient(create_app(settings)) as ui:
        dashboard = ui.get("/")
        assert dashboard.status_code == 200
        text = dashboard.text
        assert "12,000" in text  # processed: 3000 + 4000 + 5000
        assert 'id="enqueued">10<' in text
        assert 'id="retries-size">12<' in text
        queues = ui.get("/queues")
        assert queues.status_code == 200
        rows = queues.text.split('<table id="queues">')[1].split("<tr")
        reports = next(row for row in rows if "/queues/reports" in row)
        assert '<td class="num">9</td>' in reports
        page = ui.get("/queues/reports")
        assert page.status_code == 200
        assert page.text.count("reports-") >= 9
        # The delete button carries the job's partition: the job goes from that partition's list.
        assert 'name="partition" value="2"' in page.text
        form = {"name": "reports", "jid": "reports-2-1", "index": "1", "partition": "2"}
        assert ui.post("/queues/delete", data=form, headers=SAME_ORIGIN).status_code in (200, 303)
        assert cluster.llen(shards.queue_key(shards.Partition("reports", 2))) == 3
        presence(cluster, "host:1:aa", ["reports"])
        busy = ui.get("/busy")
        assert busy.status_code == 200 and "host:1:aa" in busy.text
        assert ui.get("/metrics").status_code == 200
        assert ui.post("/queues/pause", data={"name": "reports"}, headers=SAME_ORIGIN).status_code in (
            200,
            303,
        )
        assert all(
            cluster.sismember(shards.paused(shards.Partition("reports", i)), "reports") for i in range(3)
        )


@cogworker.job(queue="reports")
def report(n: int) -> None:
    """Never run here: pushed to raise the queue's partition count."""


def test_partitions_a_raised_count_adds_while_the_queue_is_paused_are_paused_too(
    home: redis.Redis, cluster: redis.RedisCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed_queue(cluster, "reports", [0, 0, 0], [0.0, 0.0, 0.0])
    assert queue_ops.pause(home, "reports") is True

    def flags(count: int) -> list[bool]:
        return [
            bool(cluster.sismember(shards.paused(shards.Partition("reports", i)), "reports"))
            for i in range(count)
        ]

    # A pusher with a larger count: its first push records 5 partitions, and pauses the two it adds.
    with configured_api(monkeypatch, COGWORKER_QUEUE_PARTITIONS="reports=5"):
        report.perform_async(1)
        assert int(cluster.hget(shards.partitions_key(), "reports") or 0) == 5
        assert flags(5) == [True] * 5
        assert queue_ops.resume(home, "reports") is True
        assert flags(5) == [False] * 5
    # Raised again while not paused: nothing is paused.
    with configured_api(monkeypatch, COGWORKER_QUEUE_PARTITIONS="reports=6"):
        report.perform_async(2)
        assert flags(6) == [False] * 6
        assert queue_ops.paused_queues(home) == set()
