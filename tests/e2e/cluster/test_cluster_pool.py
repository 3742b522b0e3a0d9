"""The pinned pool (cogworker/store/cluster_pool.py) on a real cluster: it finds the slot's master from
any live seed; every way of talking to Redis cogworker uses (commands, a MULTI pipeline, a script, the
fetch loop's DirectConnection, pub/sub) follows a failover as one SlotUnavailable (a ConnectionError:
"unavailable", never a refusal) and then works on the new master; a killed master is forgotten and
found again after the cluster promotes its replica; a node serving no slot answers CLUSTERDOWN."""

from __future__ import annotations

import redis
from redis.crc import key_slot

from cogworker.cluster_url import seeds
from cogworker.store.cluster_pool import SlotUnavailable, cluster_client
from cogworker.store.connection import is_unavailable, text_options
from cogworker.store.direct_connection import DirectConnection
from tests.support.redis_cluster import PREFIX, SLOT, RedisCluster
from tests.support.redis_server import RedisServer, free_port, wait_until

KEY = PREFIX + "pool-test"


def pinned(url: str) -> redis.Redis:
    return cluster_client(seeds(url), PREFIX, socket_timeout=5, retry=None, **text_options())


def unavailable_once(call: object) -> None:
    """`call` fails once, as unavailable, then works (it reconnected to the slot's new master)."""
    assert callable(call)
    try:
        call()
    except redis.RedisError as exc:
        assert isinstance(exc, SlotUnavailable) and is_unavailable(exc), exc
    call()


def test_the_owner_is_found_from_any_live_seed(
    redis_cluster: RedisCluster, cluster: redis.RedisCluster
) -> None:
    dead = free_port()
    plain = RedisServer()  # answers, but isn't a cluster node: CLUSTER SLOTS is refused
    try:
        client = pinned(
            f"redis+cluster://127.0.0.1:{dead},127.0.0.1:{plain.port},127.0.0.1:{redis_cluster.ports[3]}"
        )
        client.set(KEY, "v")
        owner, _ = redis_cluster.owner(SLOT)
        assert client.connection_pool.slot_owner.address() == ("127.0.0.1", owner)  # type: ignore[attr-defined]
        assert cluster.get(KEY) == "v"
        client.close()
    finally:
        plain.close()
    nobody = pinned(f"redis+cluster://127.0.0.1:{dead}")
    try:
        nobody.ping()
        raise AssertionError("a cluster with no live node answered")
    except SlotUnavailable as exc:
        assert "none of the 1 cluster nodes" in str(exc) and is_unavailable(exc)


def test_commands_pipelines_scripts_direct_connections_and_pubsub_follow_a_failover(
    redis_cluster: RedisCluster, cluster: redis.RedisCluster
) -> None:
    client = pinned(redis_cluster.url())
    script = client.register_script("return redis.call('INCR', KEYS[1])")
    direct = DirectConnection(client)
    pubsub = client.pubsub()
    pubsub.subscribe(PREFIX + "chan")
    try:
        assert client.incr(KEY) == 1
        assert script(keys=[KEY]) == 2
        assert direct.call("INCR", KEY) == 3
        pipe = client.pipeline(transaction=True)
        pipe.incr(KEY).incr(KEY)
        assert pipe.execute() == [4, 5]
        before = client.connection_pool.slot_owner.changes  # type: ignore[attr-defined]

        redis_cluster.failover(SLOT)
        unavailable_once(lambda: client.incr(KEY))
        unavailable_once(
            lambda: script(keys=[KEY])
        )  # the new master has no script cache: NOSCRIPT, then EVAL
        unavailable_once(lambda: direct.call("INCR", KEY))

        def multi() -> None:
            pipe = client.pipeline(transaction=True)
            pipe.incr(KEY).lpush(PREFIX + "list", "x")
            pipe.execute()

        unavailable_once(multi)
        assert int(cluster.get(KEY)) >= 8 and cluster.llen(PREFIX + "list") >= 1
        assert client.connection_pool.slot_owner.changes > before  # type: ignore[attr-defined]
        # PUBLISH reaches every node of a cluster: the subscriber (on the old master) still hears it.
        cluster.publish(PREFIX + "chan", "hello")
        message = wait_until(
            lambda: pubsub.get_message(ignore_subscribe_messages=True, timeout=0.2), timeout=10
        )
        assert message["data"] == "hello"
    finally:
        pubsub.close()
        direct.close()
        client.close()


def test_a_killed_master_is_forgotten_and_its_promoted_replica_found(
    redis_cluster: RedisCluster, cluster: redis.RedisCluster
) -> None:
    client = pinned(redis_cluster.url())
    client.set(KEY, "before")
    owner, _ = redis_cluster.owner(SLOT)
    node = next(n for n in redis_cluster.nodes if n.port == owner)
    node.stop()  # SIGTERM without a save: the cluster must fail it over to its replica
    try:
        # Unavailable (connection refused, then the old owner forgotten) until the replica is
        # promoted, then it works again with no help.
        def works() -> bool:
            try:
                return client.set(KEY, "after") is True
            except redis.RedisError as exc:
                assert is_unavailable(exc), exc
                return False

        wait_until(works, timeout=30, interval=0.1, message="the promoted replica to be found")
        assert client.connection_pool.slot_owner.address()[1] != owner  # type: ignore[attr-defined]
    finally:
        node.start()  # back as a replica (its nodes.conf is kept); the next test waits for cluster ok
        client.close()
    assert cluster.get(KEY) == "after"


def test_a_node_that_serves_no_slot_answers_clusterdown(redis_cluster: RedisCluster) -> None:
    lonely = RedisServer(extra=("--cluster-enabled", "yes", "--cluster-port", str(free_port())))
    try:
        client = pinned(f"redis+cluster://127.0.0.1:{lonely.port}")
        try:
            client.ping()
            raise AssertionError("a node with no slot was taken for the owner")
        except SlotUnavailable as exc:
            assert f"no master serves slot {key_slot(b'{cw}')}" in str(exc)
        # Told by a (stale) MOVED that it owns the slot: it answers CLUSTERDOWN, and is forgotten.
        owner = client.connection_pool.slot_owner  # type: ignore[attr-defined]
        owner.moved("127.0.0.1", lonely.port)
        try:
            client.get(KEY)
            raise AssertionError("CLUSTERDOWN was taken for an answer")
        except SlotUnavailable as exc:
            assert str(exc).startswith("CLUSTERDOWN") and is_unavailable(exc)
        assert owner.changes == 2  # taken from the MOVED, then forgotten
        client.close()
    finally:
        lonely.close()
