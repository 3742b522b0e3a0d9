"""Unique jobs in the sharded layout, on a real 3-master cluster: the claim (`<prefix>{home}:unique:<digest>`)
is taken in the home slot by the client chain before the job is written to one of its queue's
partitions, and given back or kept after a failed write exactly as in the one-slot layout
(api/unique.py, api/push_outcome.py). Workers' releases: test_unique_worker.py."""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import sharded_unique_jobs as uj
from redis.crc import key_slot

import cogworker
import cogworker.aio
from cogworker import codec
from cogworker.api import client as cw_client
from cogworker.api import push_shards
from cogworker.api.push_outcome import PushOutcomeUnknown
from cogworker.ops import cancel as cancel_ops
from cogworker.ops import cancel_shards, set_actions
from cogworker.store import shards
from cogworker.store.locks import Locks, unique_digest
from cogworker.store.outage import Outages
from cogworker.store.scripts import Scripts
from tests.e2e.sharded.conftest import sharded_env
from tests.e2e.sharded.pushing import configured_api, queued, scheduled
from tests.support.first_call import first_call
from tests.support.redis_cluster import RedisCluster
from tests.support.resp_proxy import RespProxy

PARTS = tuple(shards.Partition("uq", i) for i in range(3))


@cogworker.job(queue="uq")
def plain(n: int) -> None:
    """Never run here: made unique by `.set(unique=...)`."""


def digest(name: str, *args: Any) -> str:
    return unique_digest({"class": name, "queue": "uq", "args": list(args), "kwargs": {}})


def claim_key(name: str, *args: Any, prefix: str = "cw:") -> str:
    """The claim's key as the layout names it: in the home slot, whatever partition the job is in."""
    return f"{prefix}{{home}}:unique:{digest(name, *args)}"


def everywhere(cluster: redis.RedisCluster) -> list[str]:
    return [j for p in PARTS for j in queued(cluster, p)]


@pytest.fixture
def api(env: dict[str, str], cluster: redis.RedisCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with configured_api(monkeypatch, COGWORKER_QUEUE_PARTITIONS="uq=3"):
        yield


def test_a_first_call_configured_only_by_the_environment_claims_in_the_home_slot(
    redis_cluster: RedisCluster, cluster: redis.RedisCluster
) -> None:
    env = sharded_env(
        redis_cluster, COGWORKER_QUEUE_PARTITIONS="uq=3", COGWORKER_REQUIRE="sharded_unique_jobs"
    )
    url = env.pop("COGWORKER_REDIS_URL")
    code = "import sharded_unique_jobs as j\nfor _ in range(2): print(j.mark.perform_async('p', 'a'))"
    lines = first_call(code, url, **env).splitlines()  # between them, the duplicate's debug log line
    jid, duplicate = lines[0], lines[-1]
    assert duplicate == "None"
    assert cluster.get(claim_key("sharded_unique_jobs.mark", "p", "a")) == jid
    index = zlib.crc32(jid.encode()) % 3  # api/push_shards.py's choice
    assert [str(codec.loads(r)["jid"]) for r in cluster.lrange(f"cw:{{uq#{index}}}:queue", 0, -1)] == [jid]
    # The only claim is the home slot's: none in any partition.
    claims = [str(k) for k in cluster.scan_iter(match="*unique*", target_nodes=redis.RedisCluster.PRIMARIES)]
    assert claims == [claim_key("sharded_unique_jobs.mark", "p", "a")]


def test_a_duplicate_bound_for_another_partition_is_refused(api: None, cluster: redis.RedisCluster) -> None:
    """The claim is per digest, not per partition: a copy with another jid, which would be written to
    another partition, is still a duplicate."""
    jid = uj.mark.perform_async("p", "x")
    assert jid is not None
    home = push_shards.partition_of({"queue": "uq", "jid": jid})
    others = [uj.mark.build(("p", "x"), {}) for _ in range(30)]
    elsewhere = [o for o in others if push_shards.partition_of(o) != home]
    assert len({push_shards.partition_of(o) for o in elsewhere}) == 2  # both other partitions tried
    assert [uj.mark.send(o) for o in elsewhere] == [None] * len(elsewhere)
    assert everywhere(cluster) == [jid]
    assert cluster.get(claim_key(uj.mark.name, "p", "x")) == jid


def test_bulk_set_scheduled_and_awaitable_pushes_claim_once(api: None, cluster: redis.RedisCluster) -> None:
    jids = cogworker.push_bulk(uj.mark, [("p", "b1"), ("p", "b2"), ("p", "b1")])
    assert jids[0] is not None and jids[1] is not None and jids[2] is None
    first = plain.set(unique="until_executed").perform_async(1)
    assert first is not None and plain.set(unique="until_executed").perform_async(1) is None
    later = uj.mark.perform_in(3600, "p", "later")
    assert later is not None and uj.mark.perform_async("p", "later") is None
    assert cluster.pttl(claim_key(uj.mark.name, "p", "later")) > 3600_000  # lives until due, and then some

    async def push() -> tuple[str | None, str | None, list[str | None]]:
        try:
            one = await uj.mark.aio.perform_async("p", "a1")
            again = await uj.mark.aio.perform_async("p", "a1")
            bulk = await cogworker.aio.push_bulk(uj.mark, [("p", "a2"), ("p", "a1")])
            return one, again, bulk
        finally:
            await cogworker.aio.close()

    one, again, bulk = asyncio.run(push())
    assert one is not None and again is None and bulk[0] is not None and bulk[1] is None
    assert sorted(everywhere(cluster)) == sorted(str(j) for j in (jids[0], jids[1], first, one, bulk[0]))
    assert sum(later in scheduled(cluster, p) for p in PARTS) == 1
    for name, args, jid in [
        (uj.mark.name, ("p", "b1"), jids[0]),
        (plain.name, (1,), first),
        (uj.mark.name, ("p", "a1"), one),
    ]:
        assert cluster.get(claim_key(name, *args)) == jid


def test_a_cancelled_waiting_job_gives_its_claim_back_even_when_the_home_step_is_lost(
    api: None, cluster: redis.RedisCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn = cw_client.connection()
    jid = uj.mark.perform_async("p", "c")
    assert jid is not None
    real = cancel_shards.finish

    def lost(*args: Any) -> None:
        raise redis.ConnectionError("home step lost")

    monkeypatch.setattr(cancel_shards, "finish", lost)
    assert cancel_ops.cancel(conn, Scripts(conn), jid).case == "queued"
    assert everywhere(cluster) == []  # off its partition's queue...
    assert cluster.get(claim_key(uj.mark.name, "p", "c")) == jid  # ...its claim not released yet
    monkeypatch.setattr(cancel_shards, "finish", real)
    assert cancel_ops.cancel(conn, Scripts(conn), jid).case == "queued"  # the same answer, home step done
    assert cluster.exists(claim_key(uj.mark.name, "p", "c")) == 0
    assert uj.mark.perform_async("p", "c") is not None


def test_a_scheduled_job_killed_by_an_operator_gives_its_claim_back(
    api: None, cluster: redis.RedisCluster
) -> None:
    conn = cw_client.connection()
    jid = uj.mark.perform_in(3600, "p", "k")
    assert jid is not None
    entry = set_actions.kill(conn, Scripts(conn), cw_client.settings(), "scheduled", jid)
    assert entry.partition is not None
    dead = cluster.zrange(shards.dead(entry.partition), 0, -1)
    assert [codec.loads(raw)["jid"] for raw in dead] == [jid]
    assert cluster.exists(claim_key(uj.mark.name, "p", "k")) == 0
    assert uj.mark.perform_async("p", "k") is not None


def test_two_deployments_on_one_cluster_never_see_each_others_claims(
    redis_cluster: RedisCluster, cluster: redis.RedisCluster
) -> None:
    code = "import sharded_unique_jobs as j; print(j.mark.perform_async('p', 'same'))"
    jids = {}
    for prefix in ("cw:", "other:"):
        env = sharded_env(redis_cluster, COGWORKER_REQUIRE="sharded_unique_jobs")
        env["COGWORKER_KEY_PREFIX"] = prefix
        jids[prefix] = first_call(code, env.pop("COGWORKER_REDIS_URL"), **env)
    assert "None" not in jids.values() and jids["cw:"] != jids["other:"]
    for prefix, jid in jids.items():
        assert cluster.get(claim_key(uj.mark.name, "p", "same", prefix=prefix)) == jid
        assert [str(codec.loads(r)["jid"]) for r in cluster.lrange(f"{prefix}{{uq#0}}:queue", 0, -1)] == [jid]


# Lost replies: the home slot's client and partition uq#0's each through a RESP proxy.


@pytest.fixture
def proxied(
    env: dict[str, str],
    redis_cluster: RedisCluster,
    cluster: redis.RedisCluster,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[RespProxy, RespProxy]]:
    """(home proxy, partition proxy), with the queue in one partition (uq#0)."""
    with configured_api(monkeypatch, COGWORKER_QUEUE_PARTITIONS="uq=1", COGWORKER_REDIS_TIMEOUT_S="2"):
        home = RespProxy(redis_cluster.owner(key_slot(b"home"))[0])
        part = RespProxy(redis_cluster.owner(key_slot(b"uq#0"))[0])
        options: dict[str, Any] = {"socket_timeout": 2, "encoding_errors": "surrogateescape"}
        cw_client.configure(cw_client.settings(), client=home.client(**options))
        cw_client.shard_clients()._by_slot[key_slot(b"uq#0")] = part.client(**options)
        try:
            yield home, part
        finally:
            cw_client.close()
            home.close()
            part.close()


def _sent(payload: dict[str, Any]) -> Any:
    return uj.mark.send(dict(payload))


def test_a_lost_reply_of_the_claim_gives_it_back_and_the_resend_pushes_once(
    proxied: tuple[RespProxy, RespProxy], cluster: redis.RedisCluster
) -> None:
    home, _ = proxied
    key = claim_key(uj.mark.name, "p", "s")
    rule = home.lose_reply(command=("SET",), arg=b"unique")
    payload = uj.mark.build(("p", "s"), {})
    with pytest.raises(redis.ConnectionError):
        _sent(payload)
    assert rule.fired == 1
    assert cluster.exists(key) == 0 and queued(cluster, PARTS[0]) == []  # given back, nothing pushed
    assert _sent(payload) == payload["jid"]
    assert cluster.get(key) == payload["jid"] and queued(cluster, PARTS[0]) == [payload["jid"]]


def test_a_claim_whose_reply_and_give_back_were_lost_lets_its_own_resend_through(
    proxied: tuple[RespProxy, RespProxy], cluster: redis.RedisCluster
) -> None:
    home, _ = proxied
    key = claim_key(uj.mark.name, "p", "g")
    home.lose_reply(command=("SET",), arg=b"unique")
    gone = home.drop_command(script="owned_delete")
    payload = uj.mark.build(("p", "g"), {})
    with pytest.raises(redis.ConnectionError):
        _sent(payload)
    assert gone.fired == 1
    assert cluster.get(key) == payload["jid"] and queued(cluster, PARTS[0]) == []  # held by the same jid
    assert _sent(payload) == payload["jid"]  # its own claim: the write goes
    assert queued(cluster, PARTS[0]) == [payload["jid"]]
    assert uj.mark.perform_async("p", "g") is None  # another copy is a duplicate


def test_a_lost_reply_of_the_push_keeps_the_claim_and_a_resend_makes_no_copy(
    proxied: tuple[RespProxy, RespProxy], cluster: redis.RedisCluster
) -> None:
    _, part = proxied
    key = claim_key(uj.mark.name, "p", "w")
    rule = part.lose_reply(script="push_batch")
    payload = uj.mark.build(("p", "w"), {})
    assert _sent(payload) == payload["jid"]  # the partition's markers say it was written
    assert rule.fired == 1
    assert cluster.get(key) == payload["jid"]
    assert _sent(payload) == payload["jid"]
    assert uj.mark.perform_async("p", "w") is None
    assert queued(cluster, PARTS[0]) == [payload["jid"]]


def test_a_push_that_never_ran_gives_the_claim_back(
    proxied: tuple[RespProxy, RespProxy], cluster: redis.RedisCluster
) -> None:
    _, part = proxied
    key = claim_key(uj.mark.name, "p", "n")
    rule = part.drop_command(script="push_batch")
    payload = uj.mark.build(("p", "n"), {})
    with pytest.raises(redis.ConnectionError) as raised:
        _sent(payload)
    assert rule.fired == 1 and not isinstance(raised.value, PushOutcomeUnknown)
    assert cluster.exists(key) == 0 and queued(cluster, PARTS[0]) == []
    assert _sent(payload) == payload["jid"]
    assert cluster.get(key) == payload["jid"] and queued(cluster, PARTS[0]) == [payload["jid"]]


def test_a_push_whose_outcome_is_unknown_keeps_the_claim(
    proxied: tuple[RespProxy, RespProxy], cluster: redis.RedisCluster
) -> None:
    _, part = proxied
    key = claim_key(uj.mark.name, "p", "u")
    part.lose_reply(script="push_batch")
    asked = part.drop_command(script="push_check")
    payload = uj.mark.build(("p", "u"), {})
    with pytest.raises(PushOutcomeUnknown):
        _sent(payload)
    assert asked.fired == 1
    assert cluster.get(key) == payload["jid"]  # it may be queued (it is): the claim stays
    assert uj.mark.perform_async("p", "u") is None
    assert _sent(payload) == payload["jid"]
    assert queued(cluster, PARTS[0]) == [payload["jid"]]


def test_a_release_whose_reply_was_lost_is_sent_again_and_never_frees_a_newer_copys_claim(
    proxied: tuple[RespProxy, RespProxy], cluster: redis.RedisCluster
) -> None:
    home, _ = proxied
    key = claim_key(uj.mark.name, "p", "r")
    jid = uj.mark.perform_async("p", "r")
    payload = codec.loads(cluster.lindex(shards.queue_key(PARTS[0]), 0))
    assert payload["jid"] == jid
    conn = cw_client.connection()  # the home slot's (through its proxy), as every release's is
    locks = Locks(conn, Scripts(conn), Outages())
    rule = home.lose_reply(script="owned_delete")
    locks.release_terminal(payload)
    assert rule.fired == 1 and locks.deferred == 1  # kept, for the poller to send again
    assert cluster.exists(key) == 0  # it ran
    newer = uj.mark.perform_async("p", "r")
    assert newer is not None
    assert locks.retry_deferred() == 1 and locks.deferred == 0
    assert cluster.get(key) == newer  # owner-checked: the release sent again freed nothing of it
