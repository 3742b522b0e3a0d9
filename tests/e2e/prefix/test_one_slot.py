"""With COGWORKER_KEY_PREFIX={myapp}: every key and channel of a deployment is in one hash slot (what
Redis Cluster needs), and every Lua script touches only the keys it declared in KEYS.

A real swarm runs a full mix (push, bulk push, scheduled, retry, dead and death notices, unique,
status, result, periodic with its running lock, cancel, a batch with a dead member, a child killed
mid-job and recovered, an orphan of a dead process, a batch member cancelled as its process died,
a wrong-type key quarantined, a chain with a group, the CLI's verbs) while MONITOR records every
command Redis runs. Then: every key left in Redis, and every key and channel any command named,
starts with the prefix and hashes to the prefix's slot; every script was given at least one key; and
every command a script ran touched only keys the script was given.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.crc import key_slot

from tests.support.daemon_env import clean_env
from tests.support.first_call import first_call
from tests.support.monitor import Command, Monitor
from tests.support.redis_server import RedisServer, wait_until
from tests.support.swarm import SwarmRunner, swarm_runner

pytestmark = pytest.mark.slow

PREFIX = "{myapp}:"
SLOT = key_slot(PREFIX.encode())
APP_KEYS = b"test:"  # the test jobs' own records, not cogworker's
CHANNEL_COMMANDS = {"PUBLISH", "SUBSCRIBE", "UNSUBSCRIBE"}
KEYLESS = {
    "PING",
    "HELLO",
    "CLIENT",
    "INFO",
    "TIME",
    "MULTI",
    "EXEC",
    "SCRIPT",
    "CONFIG",
    "SELECT",
    "MONITOR",
}
SCRIPT_COMMANDS = {"EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO"}


@pytest.fixture
def swarms(private_redis: RedisServer, tmp_path: Path) -> Iterator[SwarmRunner]:
    yield from swarm_runner(private_redis.url, tmp_path)


def cli(url: str, *argv: str) -> subprocess.CompletedProcess[str]:
    env = clean_env(COGWORKER_REDIS_URL=url, COGWORKER_KEY_PREFIX=PREFIX, COGWORKER_REQUIRE="slot_app")
    return subprocess.run(
        [sys.executable, "-m", "cogworker", *argv], env=env, capture_output=True, text=True, timeout=60
    )


class KeyReader:
    """The keys (or channels) a command names, as Redis itself reads them (COMMAND GETKEYS)."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self._known: dict[tuple[bytes, ...], list[bytes]] = {}

    def keys_of(self, command: Command) -> list[bytes]:
        if command.name in KEYLESS:
            return []
        if command.name in CHANNEL_COMMANDS:
            return list(command.args[1:2] if command.name == "PUBLISH" else command.args[1:])
        if command.args not in self._known:
            try:
                found = self._client.command_getkeys(*command.args)
            except redis.ResponseError:  # a command without keys
                found = []
            self._known[command.args] = [k if isinstance(k, bytes) else str(k).encode() for k in found]
        return self._known[command.args]


def run_everything(url: str, r: redis.Redis, swarms: SwarmRunner) -> None:
    """One of each thing cogworker does, ending with the swarm's clean stop."""
    orphan = {"class": "slot_app.record", "args": ["orphan"], "jid": "orphan1", "queue": "default"}
    r.rpush(f"{PREFIX}inprogress:ghost", json.dumps(orphan))
    # A batch member cancelled while its process died: requeue.lua drops it and counts it in its
    # batch (batch_lib.lua, over the keys the caller declared for it).
    member = {
        "class": "slot_app.record",
        "args": ["ghost-m"],
        "jid": "ghostm1",
        "queue": "default",
        "bid": "gb",
    }
    r.rpush(f"{PREFIX}inprogress:ghost", json.dumps(member))
    r.zadd(f"{PREFIX}cancels", {"ghostm1": time.time()})
    r.hset(f"{PREFIX}batch:gb", mapping={"total": 1, "holds": 0, "created_at": time.time()})
    r.sadd(f"{PREFIX}batch-pending:gb", "ghostm1")
    r.sadd(f"{PREFIX}inprogress-identities", "ghost")
    r.set(f"{PREFIX}queue:broken", "not a list")
    r.sadd(f"{PREFIX}queues", "broken")
    swarm = swarms.start(
        COGWORKER_KEY_PREFIX=PREFIX,
        COGWORKER_REQUIRE="slot_app",
        COGWORKER_KEY_GUARD_INTERVAL_S="0.5",
        COGWORKER_ORPHAN_CHECK_INTERVAL_S="0.5",
        COGWORKER_POLL_INTERVAL_S="0.2",
    )
    swarm.wait_ready(timeout=60)
    code = """
        import time, cogworker, slot_app
        for i in range(3):
            slot_app.record.perform_async(f"one-{i}")
        cogworker.push_bulk(slot_app.record, [(f"bulk-{i}",) for i in range(3)])
        cogworker.push_bulk(slot_app.record.set(queue="default"), [("bulk-later",)], at=time.time() + 1)
        slot_app.record.perform_in(1, "later")
        slot_app.fails.perform_async("f")
        slot_app.dies.perform_async("d")
        slot_app.unique_one.perform_async("u")
        slot_app.unique_one.perform_async("u")
        slot_app.tracked.perform_async("t")
        print("RESULT", cogworker.result(slot_app.add.perform_async(2, 3), timeout=30))
        slot_app.sleeper.perform_async("s")
        queued = slot_app.record.set(queue="unread").perform_async("never")
        print("CANCELS", cogworker.cancel(queued).case, cogworker.cancel("nobody").case)
        group = cogworker.group(slot_app.record.s("chain-g1"), slot_app.record.s("chain-g2"))
        print("CHAIN", cogworker.chain(slot_app.record.s("chain-1"), group, slot_app.record.s("chain-2")).id)
        with cogworker.batch("slot", on_complete=slot_app.record, on_death=slot_app.record) as b:
            slot_app.record.perform_async("batch-m1")
            slot_app.dies.perform_async("batch-d1")
        print("BATCH", b.bid)
    """
    out = first_call(code, url, timeout=60, COGWORKER_KEY_PREFIX=PREFIX).splitlines()
    [chain_id] = [line.split()[1] for line in out if line.startswith("CHAIN")]
    [bid] = [line.split()[1] for line in out if line.startswith("BATCH")]
    assert [line for line in out if line.startswith(("RESULT", "CANCELS"))] == [
        "RESULT 5",
        "CANCELS queued not_found",
    ], out
    wanted = {
        "one-0",
        "one-1",
        "one-2",
        "bulk-0",
        "bulk-1",
        "bulk-2",
        "bulk-later",
        "later",
        "u",
        "t",
        "orphan",
        "chain-1",
        "chain-g1",
        "chain-g2",
        "chain-2",
        "batch-m1",
        bid,  # the batch's callbacks (batch_ack.lua, the dead filing's batch step, batch_close.lua)
    }
    wait_until(lambda: wanted <= {str(t).split()[0] for t in r.lrange("test:ran", 0, -1)}, timeout=60)
    wait_until(
        lambda: r.zcard(f"{PREFIX}retry") and r.zcard(f"{PREFIX}dead") and r.llen("test:deaths"), timeout=30
    )
    wait_until(lambda: r.llen("test:ticks") >= 2, timeout=30)
    wait_until(lambda: r.hget(f"{PREFIX}batch:gb", "completed_at"), timeout=30, message="ghost batch")
    assert r.hget(f"{PREFIX}batch:gb", "failed") == "1"
    wait_until(lambda: r.keys(f"{PREFIX}quarantine:queue:broken:*"), timeout=30)
    # A child killed mid-job: the supervisor has its fork server requeue the job, another child runs it.
    started = wait_until(lambda: r.lrange("test:started", 0, -1), timeout=30)
    os.kill(int(str(started[0]).split()[1]), signal.SIGKILL)
    wait_until(lambda: r.llen("test:started") >= 2, timeout=60, message="the killed job to run again")
    for argv in (
        ["status"],
        ["queues"],
        ["retry", "list"],
        ["dead", "list"],
        ["periodic", "list"],
        ["doctor"],
        ["cancel", "nobody2"],
        ["enqueue", "slot_app.record", '["cli"]'],
        ["recover-orphans"],
        ["chain", "show", chain_id],
    ):
        done = cli(url, *argv)
        assert done.returncode in (0, 1), (argv, done.stderr)  # doctor may WARN/FAIL, cancel not find
        assert "Traceback" not in done.stderr, (argv, done.stderr)
    wait_until(lambda: "cli" in {str(t).split()[0] for t in r.lrange("test:ran", 0, -1)}, timeout=30)
    assert swarm.stop(timeout=60) == 0  # the running sleeper is handed back at stop


@pytest.mark.timeout(240)
def test_every_key_is_in_the_prefixs_slot_and_scripts_touch_only_declared_keys(
    private_redis: RedisServer, swarms: SwarmRunner
) -> None:
    url = private_redis.url
    r = private_redis.client()
    monitor = Monitor(url)
    try:
        run_everything(url, r, swarms)
    finally:
        commands = monitor.stop()

    left = [str(k) for k in r.keys("*") if not str(k).startswith(APP_KEYS.decode())]
    assert len(left) > 15, left
    assert [k for k in left if not k.startswith(PREFIX) or key_slot(k.encode()) != SLOT] == []
    assert [k for k in left if k.startswith("cogworker:")] == []

    reader = KeyReader(redis.Redis.from_url(url))
    named, undeclared, keyless_scripts = set(), [], []
    declared: set[bytes] = set()
    scripts_run = 0
    for command in commands:
        found = [k for k in reader.keys_of(command) if not k.startswith(APP_KEYS)]
        named.update(found)
        if command.name in SCRIPT_COMMANDS:
            scripts_run += 1
            declared = set(found)
            if not found:
                keyless_scripts.append(command.args[:3])
        elif command.source == "lua":
            undeclared += [(command.args[:2], k) for k in found if k not in declared]
    assert scripts_run > 50 and len(named) > 30
    assert keyless_scripts == []
    assert undeclared == []
    assert [k for k in named if not k.startswith(PREFIX.encode()) or key_slot(k) != SLOT] == []
    r.close()
