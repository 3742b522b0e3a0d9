"""A run of one of each thing cogworker does (a swarm, every kind of job and feature, the CLI's verbs), for
the tests of which keys a deployment touches: its prefix's one slot (tests/e2e/prefix/test_one_slot.py)
and its families beside a Sidekiq app's keys (test_sidekiq_families.py). A Monitor records every
command meanwhile; KeyReader tells the keys each names as Redis reads them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

import redis

from tests.support.daemon_env import clean_env
from tests.support.first_call import first_call
from tests.support.monitor import Command
from tests.support.redis_server import wait_until
from tests.support.swarm import SwarmRunner

# A batch id of cogworker's shape (24 hex digits): in the Sidekiq mode any other is a Sidekiq Pro
# batch's, which cogworker leaves alone (api/sidekiq_payload.py).
GHOST_BID = "0badc0ffee0badc0ffee0b0b"


@dataclass(frozen=True)
class Layout:
    """Where the run's keys start: `own` for cogworker's own, `shared` for the families shared with
    Sidekiq (the same as `own` outside the Sidekiq mode); `env` configures every process of the run.
    `dying` is the job (tests/apps/slot_app.py) that goes to the dead set at once."""

    own: str
    shared: str
    env: dict[str, str] = field(default_factory=dict)
    dying: str = "dies"


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


def cli(url: str, layout: Layout, *argv: str) -> subprocess.CompletedProcess[str]:
    env = clean_env(layout.env, COGWORKER_REDIS_URL=url, COGWORKER_REQUIRE="slot_app")
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


def run_everything(url: str, r: redis.Redis, swarms: SwarmRunner, layout: Layout) -> None:
    """One of each thing cogworker does, ending with the swarm's clean stop."""
    own, shared = layout.own, layout.shared
    orphan = {"class": "slot_app.record", "args": ["orphan"], "jid": "orphan1", "queue": "default"}
    r.rpush(f"{own}inprogress:ghost", json.dumps(orphan))
    # A batch member cancelled while its process died: requeue.lua drops it and counts it in its
    # batch (batch_lib.lua, over the keys the caller declared for it).
    member = {
        "class": "slot_app.record",
        "args": ["ghost-m"],
        "jid": "ghostm1",
        "queue": "default",
        "bid": GHOST_BID,
    }
    r.rpush(f"{own}inprogress:ghost", json.dumps(member))
    r.zadd(f"{own}cancels", {"ghostm1": time.time()})
    r.hset(f"{own}batch:{GHOST_BID}", mapping={"total": 1, "holds": 0, "created_at": time.time()})
    r.sadd(f"{own}batch-pending:{GHOST_BID}", "ghostm1")
    r.sadd(f"{own}inprogress-identities", "ghost")
    r.set(f"{shared}queue:broken", "not a list")
    r.sadd(f"{shared}queues", "broken")
    swarm = swarms.start(
        None,
        None,
        None,
        **layout.env,
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
    code = code.replace("slot_app.dies.", f"slot_app.{layout.dying}.")
    out = first_call(code, url, timeout=60, **layout.env).splitlines()
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
        lambda: r.zcard(f"{shared}retry") and r.zcard(f"{shared}dead") and r.llen("test:deaths"), timeout=30
    )
    wait_until(lambda: r.llen("test:ticks") >= 2, timeout=30)
    wait_until(lambda: r.hget(f"{own}batch:{GHOST_BID}", "completed_at"), timeout=30, message="ghost batch")
    assert r.hget(f"{own}batch:{GHOST_BID}", "failed") == "1"
    wait_until(lambda: r.keys(f"{own}quarantine:queue:broken:*"), timeout=30)
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
        ["doctor", "--fix"],
        ["cancel", "nobody2"],
        ["enqueue", "slot_app.record", '["cli"]'],
        ["recover-orphans"],
        ["chain", "show", chain_id],
    ):
        done = cli(url, layout, *argv)
        assert done.returncode in (0, 1), (argv, done.stderr)  # doctor may WARN/FAIL, cancel not find
        assert "Traceback" not in done.stderr, (argv, done.stderr)
    wait_until(lambda: "cli" in {str(t).split()[0] for t in r.lrange("test:ran", 0, -1)}, timeout=30)
    assert swarm.stop(timeout=60) == 0  # the running sleeper is handed back at stop


@dataclass
class KeyUse:
    """What the recorded commands named: every key and channel (the test jobs' own records left out),
    the keys a script's commands touched that the script was not given, and scripts given no key."""

    named: set[bytes] = field(default_factory=set)
    undeclared: list[tuple[tuple[bytes, ...], bytes]] = field(default_factory=list)
    keyless_scripts: list[tuple[bytes, ...]] = field(default_factory=list)
    scripts_run: int = 0


def key_use(url: str, commands: list[Command]) -> KeyUse:
    reader = KeyReader(redis.Redis.from_url(url))
    use = KeyUse()
    declared: set[bytes] = set()
    for command in commands:
        found = [k for k in reader.keys_of(command) if not k.startswith(APP_KEYS)]
        use.named.update(found)
        if command.name in SCRIPT_COMMANDS:
            use.scripts_run += 1
            declared = set(found)
            if not found:
                use.keyless_scripts.append(command.args[:3])
        elif command.source == "lua":
            use.undeclared += [(command.args[:2], k) for k in found if k not in declared]
    return use
