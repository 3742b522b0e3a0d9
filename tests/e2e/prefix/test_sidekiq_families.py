"""In the Sidekiq mode (COGWORKER_SIDEKIQ_COMPAT=6, bare keys), on a Redis a Rails app shares: a swarm runs
the full mix of tests/support/full_mix.py while MONITOR records every command. Every key any command
names is cogworker's own (under its prefix), one of the families it shares with Sidekiq (the queues, the
queue registry, the job sets, the two counters, the process registry), or the Sidekiq presence of one of
its own processes. The Rails app's keys and a Ruby process's presence are never named, and hold what
they held, with their TTLs; the key guard and `doctor --fix` move aside only a shared key of the wrong
type, as they would their own."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.support.full_mix import APP_KEYS, KeyReader, Layout, key_use, run_everything
from tests.support.monitor import Monitor
from tests.support.redis_server import RedisServer
from tests.support.swarm import SwarmRunner, swarm_runner

pytestmark = pytest.mark.slow

OWN = "cw:"
LAYOUT = Layout(
    own=OWN,
    shared="",
    env={"COGWORKER_KEY_PREFIX": OWN, "COGWORKER_SIDEKIQ_COMPAT": "6"},
    dying="dies_at_once",
)
SHARED_NAMES = {"queues", "schedule", "retry", "dead", "processes", "stat:processed", "stat:failed"}
SHARED_STARTS = ("queue:", "stat:processed:", "stat:failed:")
RUBY = "ruby-host:9:0123456789ab"
READS = {"HGETALL", "HGET", "HMGET", "HLEN", "EXISTS", "TYPE", "TTL", "PTTL", "HSCAN"}


def seed_foreign(r: redis.Redis) -> dict[str, tuple[bytes, int]]:
    """A Rails app's keys and a live Ruby process's presence; each key's DUMP and TTL."""
    r.set("cache:views/home", "<html>", ex=3600)
    r.hset("session:1", mapping={"user": "7"})
    r.sadd("rails:locks", "a", "b")
    r.zadd("leaderboard", {"x": 1})
    r.rpush("mailer:outbox", "m1")
    r.set("unique:0f0f", "jid-of-an-enterprise-lock", ex=600)  # Sidekiq Enterprise's unique lock
    r.hset("b-BID123", mapping={"total": 3, "pending": 1})  # a Sidekiq Pro batch
    info = '{"hostname":"ruby-host","pid":9,"queues":["rb"],"concurrency":5,"identity":"' + RUBY + '"}'
    r.hset(RUBY, mapping={"info": info, "busy": 0, "beat": time.time(), "quiet": "false", "rss": 1024})
    r.expire(RUBY, 600)
    r.hset(f"{RUBY}:workers", "tid1", '{"queue":"rb","payload":{},"run_at":1}')
    r.sadd("processes", RUBY)
    snapshot = {}
    for key in [k.decode() for k in r.keys("*") if k != b"processes"]:
        dumped = r.dump(key)
        assert isinstance(dumped, bytes)
        snapshot[key] = (dumped, int(r.ttl(key)))
    return snapshot


@pytest.fixture
def swarms(private_redis: RedisServer, tmp_path: Path) -> Iterator[SwarmRunner]:
    yield from swarm_runner(private_redis.url, tmp_path)


@pytest.mark.timeout(240)
def test_the_mode_names_only_its_own_keys_and_the_shared_families(
    private_redis: RedisServer, swarms: SwarmRunner
) -> None:
    url = private_redis.url
    r = private_redis.client()
    # decode_responses=False for DUMP: a second client.
    raw = redis.Redis.from_url(url)
    foreign = seed_foreign(raw)
    monitor = Monitor(url)
    try:
        run_everything(url, r, swarms, LAYOUT)
    finally:
        commands = monitor.stop()

    use = key_use(url, commands)
    assert use.scripts_run > 50 and use.keyless_scripts == [] and use.undeclared == []
    names = {k.decode() for k in use.named}
    ours = {n.removeprefix(OWN + "process:") for n in names if n.startswith(OWN + "process:")}
    assert len(ours) >= 2  # the swarm's children and the CLI's clients
    presence = {f"{i}{end}" for i in ours for end in ("", ":workers", "-signals")}
    elsewhere = sorted(
        n
        for n in names
        if not n.startswith(OWN)
        and n not in SHARED_NAMES
        and not n.startswith(SHARED_STARTS)
        and n not in presence
    )
    assert elsewhere == []
    # The shared families were used under Sidekiq's names, and nothing went under the prefix instead.
    assert {"queues", "retry", "dead", "processes", "stat:processed", "queue:default"} <= names
    assert not {OWN + n for n in SHARED_NAMES} & names
    # The Rails app's keys: never named. The Ruby process's presence: read (cogworker lists it), never
    # written. Both unchanged.
    ruby_keys = {RUBY, f"{RUBY}:workers"}
    assert set(foreign) & names <= ruby_keys
    reader = KeyReader(raw)
    on_ruby = {c.name for c in commands if ruby_keys & {k.decode() for k in reader.keys_of(c)}}
    assert on_ruby and on_ruby <= READS, on_ruby
    for key, (dumped, ttl) in foreign.items():
        assert raw.dump(key) == dumped, key
        # The same TTL (none stays none), less the run's seconds.
        assert ttl - 240 <= int(raw.ttl(key)) <= ttl if ttl > 0 else raw.ttl(key) == ttl, key
    assert raw.sismember("processes", RUBY)
    # The mix's wrong-type shared key (queue:broken, a string) was moved aside under cogworker's prefix.
    assert r.keys(f"{OWN}quarantine:queue:broken:*")
    left = {str(k) for k in r.keys("*") if not str(k).startswith(APP_KEYS.decode())}
    assert left - set(foreign) - {"processes"} <= {n for n in names}
    raw.close()
    r.close()
