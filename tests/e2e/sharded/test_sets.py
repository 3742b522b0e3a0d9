"""The retry, scheduled and dead sets in the sharded layout, on a real 3-master cluster: every queue
partition's set read as one (ops/set_merge.py), and every action run on the partition holding the
entry (ops/set_actions.py). Entries are seeded by ZADD with redis-py's cluster client."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from redis.crc import key_slot

from cogworker import codec
from cogworker import settings as settings_module
from cogworker.ops import (
    NotFound,
    cancel_shards,
    locate,
    places,
    set_actions,
    set_fanout,
    set_groups,
    set_search,
)
from cogworker.ops import cancel as cancel_ops
from cogworker.ops import search as search_ops
from cogworker.ops import sets as set_ops
from cogworker.settings import Settings
from cogworker.store import fanout, keys, shards
from cogworker.store.lazy_client import LazyClient
from cogworker.store.scripts import Scripts
from tests.e2e.sharded.sets_support import QUEUES, every_partition, one_slot, payload
from tests.support.redis_cluster import RedisCluster


@dataclass
class Layout:
    settings: Settings
    lazy: LazyClient

    @property
    def home(self) -> redis.Redis:
        return self.lazy.client

    @property
    def scripts(self) -> Scripts:
        return self.lazy.scripts


@pytest.fixture
def layout(
    env: dict[str, str], cluster: redis.RedisCluster, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Layout]:
    # After `cluster`: it flushes the cluster first.
    monkeypatch.setenv("COGWORKER_QUEUE_PARTITIONS", ",".join(f"{q}={n}" for q, n in QUEUES.items()))
    loaded = settings_module.load_settings()
    shards.use_settings(loaded)
    lazy = LazyClient(loaded)
    for queue in QUEUES:
        shards.record_partitions(lazy.client, queue)
    yield Layout(loaded, lazy)
    lazy.close()
    one_slot()


def seed(
    cluster: redis.RedisCluster, set_name: str, count: int, *, ties: bool = False, seed_: int = 7
) -> list[tuple[float, int, str]]:
    """`count` entries spread over every partition (scores clustered so some are equal when `ties`);
    answers (score, partition's sort index, text) of each."""
    rng = random.Random(seed_)
    parts = every_partition()
    seeded = []
    by_key: dict[str, dict[str, float]] = {}
    for n in range(count):
        index = rng.randrange(len(parts))
        p = parts[index]
        score = float(rng.randrange(20)) if ties else 1_700_000_000 + rng.random() * 1000
        raw = payload(f"jid-{n:05d}", p.queue)
        by_key.setdefault(set_ops.set_key(set_name, p), {})[raw] = score
        seeded.append((score, index, raw))
    for key, members in by_key.items():
        cluster.zadd(key, members)
    return seeded


def expected(seeded: list[tuple[float, int, str]], desc: bool) -> list[str]:
    """The merged order: by score, ties partition by partition, then Redis's order (by text; reversed
    when listing highest first)."""
    ordered = sorted(seeded, key=lambda e: e[2], reverse=desc)
    ordered.sort(key=lambda e: (-e[0] if desc else e[0], e[1]))
    return [codec.loads_dict(raw)["jid"] for _, _, raw in ordered]  # type: ignore[index]


@pytest.mark.parametrize("ties", [False, True])
def test_every_partitions_entries_list_in_score_order_with_the_right_total(
    layout: Layout, cluster: redis.RedisCluster, ties: bool
) -> None:
    seeded = seed(cluster, "retry", 700, ties=ties)
    assert set_ops.size(layout.home, "retry") == 700
    used = {index for _, index, _ in seeded}
    assert len(used) == len(every_partition())  # every partition holds some
    for desc in (False, True):
        want = expected(seeded, desc)
        for start in (0, 1, 24, 25, 333, 650, 690, 699, 700):
            page = set_ops.page(layout.home, "retry", start, 25, desc)
            assert [e.jid for e in page] == want[start : start + 25], (desc, start)
            assert all(e.partition is not None and e.partition.queue == e.queue for e in page)
    listed = set_ops.entries(layout.home, "retry")
    assert [e.jid for e in listed] == expected(seeded, False)


def test_a_filtered_search_goes_on_from_a_position_across_partitions(
    layout: Layout, cluster: redis.RedisCluster
) -> None:
    seeded = seed(cluster, "dead", 1200)
    want = [j for j in expected(seeded, True) if j.endswith("7")]
    match = set_ops.Filter(job="Job", args='7"')
    found: list[str] = []
    start = 0
    while True:
        result = set_search.search(layout.home, "dead", match, start, limit=25, desc=True)
        assert result.total == 1200
        found += [e.jid for e in result.found if e.jid is not None]
        if result.finished:
            break
        start = result.end
    reports = {codec.loads_dict(raw)["jid"] for _, _, raw in seeded if '"reports"' in raw}  # type: ignore[index]
    assert found == [j for j in want if j not in reports]


def test_groups_count_every_partition(layout: Layout, cluster: redis.RedisCluster) -> None:
    seeded = seed(cluster, "retry", 300)
    grouping = set_groups.groups(layout.home, "retry")
    assert grouping.complete and grouping.total == 300
    counts = {(g.job, g.error_class): g.count for g in grouping.groups}
    reports = sum(1 for _, _, raw in seeded if '"reports"' in raw)
    assert counts == {("app.Report", "Boom"): reports, ("app.Job", "Boom"): 300 - reports}


def test_an_entry_is_found_by_jid_and_by_its_key_in_its_partition(
    layout: Layout, cluster: redis.RedisCluster
) -> None:
    seeded = seed(cluster, "scheduled", 200)
    score, index, raw = seeded[123]
    jid = codec.loads_dict(raw)["jid"]  # type: ignore[index]
    found = set_ops.get(layout.home, "scheduled", jid)
    assert found.partition == every_partition()[index] and found.score == score
    by_key = set_ops.at_score(layout.home, "scheduled", score, jid)
    assert by_key is not None and by_key.partition == found.partition
    assert set_ops.at_score(layout.home, "scheduled", score + 1, jid) is None
    with pytest.raises(NotFound):
        set_ops.get(layout.home, "scheduled", "jid-nope")


def test_the_header_search_finds_entries_across_partitions(
    layout: Layout, cluster: redis.RedisCluster
) -> None:
    seed(cluster, "retry", 400)
    seed(cluster, "dead", 400, seed_=9)
    found = search_ops.search(layout.home, "jid-0012", budget_s=5.0, limit=100)
    places = sorted((m.place, m.jid) for m in found.matches)
    jids = [f"jid-{n:05d}" for n in range(120, 130)]
    assert places == sorted([("dead", j) for j in jids] + [("retry", j) for j in jids])
    assert found.next is None
    assert all(m.entry is not None and m.entry.partition is not None for m in found.matches)


def test_the_registry_answers_the_home_client_outside_the_sharded_layout(layout: Layout) -> None:
    assert set_fanout.client_of(layout.home, None) is layout.home
    p = every_partition()[0]
    assert set_fanout.client_of(layout.home, p) is fanout.clients_of(layout.home).of(p)
    assert set_actions.KILLABLE == ("retry", "scheduled")
    assert keys.QUEUES.startswith("cw:{home}")


def one_per_partition(cluster: redis.RedisCluster, set_name: str) -> dict[shards.Partition, str]:
    """One entry in every partition's `set_name`: partition -> its jid."""
    placed = {}
    for n, p in enumerate(every_partition()):
        jid = f"one-{p.queue}-{p.index}"
        cluster.zadd(set_ops.set_key(set_name, p), {payload(jid, p.queue): 1_700_000_000.0 + n})
        placed[p] = jid
    return placed


def test_retry_now_puts_each_entry_on_its_own_partitions_queue_once(
    layout: Layout, cluster: redis.RedisCluster
) -> None:
    placed = one_per_partition(cluster, "retry")
    for p, jid in placed.items():
        moved = set_actions.retry_now(layout.home, layout.scripts, "retry", jid)
        assert moved.partition == p
        queued = cluster.lrange(shards.queue_key(p), 0, -1)
        assert [codec.loads_dict(q)["jid"] for q in queued] == [jid]  # type: ignore[index]
        assert cluster.zcard(shards.retry(p)) == 0
        # Asked again (a reply lost after it ran): nothing there, nothing pushed a second time.
        with pytest.raises(NotFound):
            set_actions.retry_now(layout.home, layout.scripts, "retry", jid)
        assert cluster.llen(shards.queue_key(p)) == 1
    assert set_ops.size(layout.home, "retry") == 0


def test_the_move_script_sent_twice_moves_once_in_every_partition(
    layout: Layout, cluster: redis.RedisCluster
) -> None:
    """The lost reply, per partition: graduate.lua and bury.lua run again with the same arguments
    (what a client resending the write would do) answer 0 and change nothing."""
    placed = one_per_partition(cluster, "scheduled")
    for p, jid in placed.items():
        entry = set_ops.get(layout.home, "scheduled", jid)
        holder = set_fanout.client_of(layout.home, p)
        keys_ = [shards.schedule(p), shards.queue_key(p), shards.registry(p), shards.wake_channel(p)]
        args: list[Any] = [entry.raw, codec.dumps(entry.payload), p.queue]
        assert layout.scripts.run("graduate", keys_, args, client=holder) == 1
        assert layout.scripts.run("graduate", keys_, args, client=holder) == 0
        assert cluster.llen(shards.queue_key(p)) == 1
    placed = one_per_partition(cluster, "retry")
    for p, jid in placed.items():
        entry = set_ops.get(layout.home, "retry", jid)
        holder = set_fanout.client_of(layout.home, p)
        keys_ = [shards.retry(p), shards.dead(p), shards.stat(p, "failed"), shards.deaths(p)]
        args = [entry.raw, 1.0, "dead-text", "0", 0, 0, "notice", 10]
        assert layout.scripts.run("bury", keys_, args, client=holder) == 1
        assert layout.scripts.run("bury", keys_, args, client=holder) == 0
        assert cluster.zcard(shards.dead(p)) == 1 and cluster.llen(shards.deaths(p)) == 1


def test_kill_and_delete_act_on_the_partition_holding_the_entry_exactly_once(
    layout: Layout, cluster: redis.RedisCluster
) -> None:
    placed = one_per_partition(cluster, "retry")
    parts = list(placed)
    killed, deleted = parts[::2], parts[1::2]
    for p in killed:
        entry = set_actions.kill(layout.home, layout.scripts, layout.settings, "retry", placed[p])
        assert entry.partition == p
        dead = cluster.zrange(shards.dead(p), 0, -1)
        assert [(codec.loads_dict(str(d)) or {}).get("jid") for d in dead] == [placed[p]]
        assert cluster.llen(shards.deaths(p)) == 1  # the on_death hooks hear of it, in its partition
        with pytest.raises(NotFound):
            set_actions.kill(layout.home, layout.scripts, layout.settings, "retry", placed[p])
        assert cluster.zcard(shards.dead(p)) == 1
    for p in deleted:
        entry = set_ops.get(layout.home, "retry", placed[p])
        found = set_actions.delete(layout.home, "retry", placed[p], entry.score)
        assert found.partition == p and cluster.zcard(shards.retry(p)) == 0
        with pytest.raises(NotFound):
            set_actions.delete(layout.home, "retry", placed[p], entry.score)
    assert set_ops.size(layout.home, "retry") == 0
    assert set_ops.size(layout.home, "dead") == len(killed)
    assert not cluster.exists(keys.DEAD, keys.RETRY)  # the home slot's sets are never written


def test_bulk_actions_cover_every_partition(layout: Layout, cluster: redis.RedisCluster) -> None:
    seed(cluster, "retry", 300)
    reports = set_ops.Filter(queue="reports")
    in_reports = len(set_ops.entries(layout.home, "retry", reports))
    result = set_actions.kill_all(layout.home, layout.scripts, layout.settings, "retry", reports)
    assert (result.done, result.gone) == (in_reports, 0)
    for p in shards.partitions("reports", 2):
        assert cluster.zcard(shards.retry(p)) == 0
    assert set_ops.size(layout.home, "dead") == in_reports
    again = set_actions.retry_all(layout.home, layout.scripts, "retry")
    assert again.done == 300 - in_reports
    queued = sum(cluster.llen(shards.queue_key(p)) for p in every_partition())
    assert queued == 300 - in_reports
    cleared = set_actions.delete_all(layout.home, "dead")
    assert cleared.done == in_reports and set_ops.size(layout.home, "dead") == 0


def test_an_entry_naming_another_queue_is_not_moved_across_slots(
    layout: Layout, cluster: redis.RedisCluster
) -> None:
    p = shards.Partition("default", 1)
    cluster.zadd(shards.retry(p), {payload("stray", "mail"): 5.0})
    with pytest.raises(set_actions.NotRetryable, match="only go back to the queue whose partition"):
        set_actions.retry_now(layout.home, layout.scripts, "retry", "stray")
    assert cluster.zcard(shards.retry(p)) == 1
    killed = set_actions.kill(layout.home, layout.scripts, layout.settings, "retry", "stray")
    assert killed.partition == p and cluster.zcard(shards.dead(p)) == 1


def located(layout: Layout, jid: str) -> locate.Location:
    """`locate` resumed from its cursor, as the job page's "Continue searching" link does, until the
    job is found or every place was read: one request stops past MAX_WALL_S, which a loaded machine
    can reach before the partition that holds the job."""
    where = locate.locate(layout.home, layout.scripts, jid)
    for _ in range(100):
        search = where.search
        if search is None or search.next is None or search.found:
            break
        where = locate.locate(layout.home, layout.scripts, jid, cursor=search.next)
    return where


def test_locate_finds_a_job_in_any_partitions_set_or_queue(
    layout: Layout, cluster: redis.RedisCluster
) -> None:
    seed(cluster, "dead", 500)
    target = shards.Partition("default", 3)
    cluster.lpush(shards.queue_key(target), payload("waiting-1", "default"))
    where = located(layout, "waiting-1")
    assert where.search is not None and [(q.queue, q.partition) for q in where.search.queued] == [
        ("default", target)
    ]
    assert where.payload is not None and where.payload["jid"] == "waiting-1"
    dead = located(layout, "jid-00321")
    assert dead.search is not None and [e.set for e in dead.search.entries] == ["dead"]
    assert dead.search.entries[0].partition is not None
    nowhere = locate.locate(layout.home, layout.scripts, "nowhere-1")
    while nowhere.search is not None and nowhere.search.next is not None:
        nowhere = locate.locate(layout.home, layout.scripts, "nowhere-1", nowhere.search.next)
    assert nowhere.search is not None and not nowhere.found
    assert nowhere.search.total == 501 and nowhere.search.queue_count == len(QUEUES)
    # A cursor is a partition's place, and survives a round trip through a link.
    assert {places.split(p)[1] for p in nowhere.search.order} == set(every_partition())


def test_the_header_search_reads_every_queue_partition(layout: Layout, cluster: redis.RedisCluster) -> None:
    for p in every_partition():
        cluster.lpush(shards.queue_key(p), payload(f"q-{p.queue}-{p.index}", p.queue, args=["needle"]))
    found = search_ops.search(layout.home, "needle", budget_s=5.0)
    assert sorted(m.jid for m in found.matches if m.jid) == sorted(
        f"q-{p.queue}-{p.index}" for p in every_partition()
    )
    assert {m.queue for m in found.matches} == set(QUEUES)


def test_cancel_takes_a_waiting_job_off_its_partition_once(
    layout: Layout, cluster: redis.RedisCluster
) -> None:
    queued_in, scheduled_in = shards.Partition("default", 2), shards.Partition("reports", 1)
    cluster.lpush(shards.queue_key(queued_in), payload("c-queued", "default"))
    cluster.zadd(shards.schedule(scheduled_in), {payload("c-later", "reports"): 10.0})
    cluster.hset(keys.status("c-later"), mapping={"status": "queued", "queue": "reports"})
    first = cancel_ops.cancel(layout.home, layout.scripts, "c-queued")
    assert (first.case, first.queue) == ("queued", "default")
    assert cluster.llen(shards.queue_key(queued_in)) == 0
    assert cluster.get(shards.stat(queued_in, "cancelled")) == "1"
    assert cluster.zscore(keys.CANCELS, "c-queued") is None  # nothing left running to stop
    later = cancel_ops.cancel(layout.home, layout.scripts, "c-later")
    assert later.case == "scheduled" and cluster.zcard(shards.schedule(scheduled_in)) == 0
    assert cluster.hget(keys.status("c-later"), "status") == "cancelled"
    # Asked again: the same answer, counted once.
    again = cancel_ops.cancel(layout.home, layout.scripts, "c-queued")
    assert again.case == "queued" and cluster.get(shards.stat(queued_in, "cancelled")) == "1"


def test_a_cancel_whose_home_step_was_lost_answers_the_same_and_finishes_it(
    layout: Layout, cluster: redis.RedisCluster
) -> None:
    """Step 2 ran in the partition (the job is off its queue, counted, its answer kept there) and the
    home step never did (the reply lost, the process gone): the next cancel answers from the
    partition, counts nothing again, and completes the home step."""
    p = shards.Partition("default", 1)
    raw = payload("c-lost", "default")
    cluster.lpush(shards.queue_key(p), raw)
    cancel_ops.record(layout.home, layout.scripts, "c-lost")
    kept = codec.dumps({"case": "queued", "job": "app.Job", "queue": "default"})
    removed = cancel_shards.remove(
        layout.home, layout.scripts, p, "c-lost", shards.queue_key(p), False, raw, kept, 60
    )
    assert removed
    # Sent again (a resend after a lost reply): nothing left to remove, nothing counted.
    assert not cancel_shards.remove(
        layout.home, layout.scripts, p, "c-lost", shards.queue_key(p), False, raw, kept, 60
    )
    assert cluster.get(shards.stat(p, "cancelled")) == "1"
    assert cluster.zscore(keys.CANCELS, "c-lost") is not None and not cluster.exists(keys.cancelled("c-lost"))
    outcome = cancel_ops.cancel(layout.home, layout.scripts, "c-lost")
    assert outcome.case == "queued"
    assert cluster.zscore(keys.CANCELS, "c-lost") is None and cluster.exists(keys.cancelled("c-lost"))
    assert cluster.get(shards.stat(p, "cancelled")) == "1"


def test_the_job_apis_cancel_reaches_the_partition(layout: Layout, cluster: redis.RedisCluster) -> None:
    import cogworker
    from cogworker.api import client as api_client

    p = shards.Partition("reports", 1)
    cluster.lpush(shards.queue_key(p), payload("api-1", "reports"))
    api_client.configure(layout.settings)
    try:
        outcome = cogworker.cancel("api-1")
    finally:
        api_client.configure(None)
    assert outcome.case == "queued" and cluster.llen(shards.queue_key(p)) == 0


class _Faulty:
    """The scripts, with cancel.lua's reply lost: `ran` says whether it reached Redis first."""

    def __init__(self, scripts: Scripts, *, ran: bool) -> None:
        self._scripts, self._ran = scripts, ran

    def run(self, name: str, keys_: list[str], args: list[Any], client: Any = None) -> Any:
        if name != "cancel" or args[1] != "remove":
            return self._scripts.run(name, keys_, args, client=client)
        if self._ran:
            self._scripts.run(name, keys_, args, client=client)
        raise redis.ConnectionError("reply lost (injected)")


def test_a_cancel_whose_partition_reply_was_lost_after_it_ran_answers_removed(
    layout: Layout, cluster: redis.RedisCluster
) -> None:
    p = shards.Partition("default", 0)
    cluster.lpush(shards.queue_key(p), payload("lost-ran", "default"))
    faulty = _Faulty(layout.scripts, ran=True)
    outcome = cancel_ops.cancel(layout.home, faulty, "lost-ran")  # type: ignore[arg-type]
    assert outcome.case == "queued" and cluster.llen(shards.queue_key(p)) == 0
    assert cluster.get(shards.stat(p, "cancelled")) == "1" and cluster.exists(keys.cancelled("lost-ran"))


def test_a_cancel_whose_partition_step_never_ran_raises_and_the_next_one_removes_it(
    layout: Layout, cluster: redis.RedisCluster
) -> None:
    p = shards.Partition("default", 0)
    cluster.lpush(shards.queue_key(p), payload("lost-not-ran", "default"))
    with pytest.raises(redis.ConnectionError):
        cancel_ops.cancel(layout.home, _Faulty(layout.scripts, ran=False), "lost-not-ran")  # type: ignore[arg-type]
    assert cluster.llen(shards.queue_key(p)) == 1 and not cluster.exists(shards.stat(p, "cancelled"))
    assert cluster.zscore(keys.CANCELS, "lost-not-ran") is not None  # a worker fetching it won't run it
    assert cancel_ops.cancel(layout.home, layout.scripts, "lost-not-ran").case == "queued"
    assert cluster.llen(shards.queue_key(p)) == 0 and cluster.get(shards.stat(p, "cancelled")) == "1"


def test_the_sets_read_on_after_a_partitions_master_fails_over(
    layout: Layout, cluster: redis.RedisCluster, redis_cluster: RedisCluster
) -> None:
    seeded = seed(cluster, "retry", 200)
    want = expected(seeded, False)
    assert [e.jid for e in set_ops.page(layout.home, "retry", 0, 25, False)] == want[:25]
    moved = shards.Partition("default", 1)
    redis_cluster.failover(key_slot(f"{moved.queue}#{moved.index}".encode()))
    # The first reads after it meet MOVED on the old master, re-pin that partition and read again.
    assert set_ops.size(layout.home, "retry") == 200
    assert [e.jid for e in set_ops.page(layout.home, "retry", 100, 25, False)] == want[100:125]
    entry = next(e for e in set_ops.entries(layout.home, "retry") if e.partition == moved)
    set_actions.retry_now(layout.home, layout.scripts, "retry", entry.ref)
    assert cluster.llen(shards.queue_key(moved)) == 1


def test_every_position_of_a_small_set_in_two_partitions_pages_right(
    layout: Layout, cluster: redis.RedisCluster
) -> None:
    """Most partitions empty, scores tied in runs: every start position and both orders."""
    parts = every_partition()
    used = [parts[1], parts[5]]
    seeded = []
    for n in range(60):
        index = parts.index(used[n % 2])
        raw = payload(f"jid-{n:05d}", parts[index].queue)
        score = float(n // 7)
        cluster.zadd(shards.dead(parts[index]), {raw: score})
        seeded.append((score, index, raw))
    for desc in (False, True):
        want = expected(seeded, desc)
        for start in range(61):
            got = [e.jid for e in set_ops.page(layout.home, "dead", start, 5, desc)]
            assert got == want[start : start + 5], (desc, start)
