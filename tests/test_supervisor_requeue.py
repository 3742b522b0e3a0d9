"""The supervisor's immediate requeue against a real Redis, including one that goes away."""

from __future__ import annotations

from cogworker import codec, payload
from cogworker.settings import load_settings
from supervisor.requeue import RETRY_FIRST_S, Requeuer
from tests.redis_server import RedisServer


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def strand(client, identity: str, tag: str) -> str:  # type: ignore[no-untyped-def]
    """A job left on a dead process's in-progress list."""
    job = payload.build("demo_jobs.record", (tag,), {}, queue="default", retry=True)
    client.lpush(f"cogworker:inprogress:{identity}", codec.dumps(job))
    client.sadd("cogworker:inprogress-identities", identity)
    return str(job["jid"])


def test_requeues_at_once_counting_orphanings_and_reports_latency(private_redis: RedisServer) -> None:
    client = private_redis.client()
    done: list[tuple[str, int, float]] = []
    clock = Clock()
    requeuer = Requeuer(load_settings(redis_url=private_redis.url), clock, on_done=lambda *a: done.append(a))
    jid = strand(client, "h:1:dead", "a")

    assert requeuer.requeue("h:1:dead")
    assert client.llen("cogworker:queue:default") == 1
    assert client.get(f"cogworker:orphanings:{jid}") == "1"
    assert client.exists("cogworker:inprogress:h:1:dead") == 0
    assert done == [("h:1:dead", 1, 0.0)]
    # Its connection is closed after use: a fork inherits no socket.
    assert all(c._sock is None for c in requeuer._client.connection_pool._available_connections)  # type: ignore[union-attr]
    client.close()


def test_an_outage_keeps_the_identity_pending_and_retries_with_growing_delays(
    private_redis: RedisServer,
) -> None:
    client = private_redis.client()
    clock = Clock()
    done: list[tuple[str, int, float]] = []
    requeuer = Requeuer(load_settings(redis_url=private_redis.url), clock, on_done=lambda *a: done.append(a))
    private_redis.stop()

    assert not requeuer.requeue("h:2:dead")
    assert requeuer.pending == {"h:2:dead"}
    clock.now += RETRY_FIRST_S / 2
    requeuer.retry_due()  # not due yet: no attempt
    clock.now += RETRY_FIRST_S / 2
    requeuer.retry_due()  # due, fails again: the next wait doubles
    assert requeuer.pending == {"h:2:dead"}

    private_redis.start()
    strand(client, "h:2:dead", "b")
    clock.now += RETRY_FIRST_S  # only half of the doubled delay
    requeuer.retry_due()
    assert requeuer.pending == {"h:2:dead"}
    clock.now += RETRY_FIRST_S
    requeuer.retry_due()
    assert requeuer.pending == set()
    assert client.llen("cogworker:queue:default") == 1
    assert done == [("h:2:dead", 1, 3 * RETRY_FIRST_S)]
    client.close()
