"""Cancelling a waiting job in the sharded layout (ops/cancel.py; store/shards.py).

The job waits in its queue partition's slot; the cancel record, its status hash and the locks it may
hold are in the home slot. No one script reaches both, so the one-slot layout's single step
(cancel.lua "remove") becomes three, in this order:

1. the cancel record notes the jid (home; done by cancel.py before the job is looked for, as in the
   one-slot layout): a worker that fetches the job from now on ends it as cancelled;
2. in the partition, atomically (cancel.lua "remove" given the partition's keys): the job is taken
   off its queue or set by its exact payload, counted `cancelled` in the partition's counters, and
   the cancel's answer kept under the partition's `cancelled:<jid>` for CANCEL_KEEP_S. This is the
   step that decides: it happens once (a second run finds nothing to remove and counts nothing);
3. in the home slot, idempotently (`_FINISH`): the record entry goes, a status hash says
   "cancelled", the locks still its own are released, and the answer is copied to the home
   `cancelled:<jid>` that every cancel reads first.

A reply lost in step 2 is settled by reading the partition's answer (present: it ran; absent: it did
not, and asking again finds the job where it was). If step 3 is lost or never runs (the process
died), the job is already off its queue and counted; the record entry only makes a worker skip a job
no longer anywhere; and the next cancel of the jid finds the partition's answer (`earlier`), runs
step 3 again and answers the same. In the partition the three keys cancel.lua wants but that live in
the home slot (the record, the status hash) are named in the partition's slot and never exist there:
removing a jid from an empty zset and checking a missing hash do nothing.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import redis
import structlog

from cogworker.ops import set_fanout
from cogworker.store import key_guard, keys, outcomes, shards
from cogworker.store.scripts import Scripts
from cogworker.store.shards import Partition

log = structlog.get_logger("cogworker.cancel")

# Step 3. KEYS: the cancel record, the status hash, the home answer, then the locks the job named.
# ARGV: jid, the answer (JSON), seconds it is kept, the time. Every write is the same when repeated.
_FINISH = """
redis.call('ZREM', KEYS[1], ARGV[1])
if redis.call('TYPE', KEYS[2]).ok == 'hash' then
  redis.call('HSET', KEYS[2], 'status', 'cancelled', 'updated_at', ARGV[4])
end
redis.call('SET', KEYS[3], ARGV[2], 'EX', ARGV[3])
for i = 4, #KEYS do
  if redis.call('TYPE', KEYS[i]).ok == 'string' and redis.call('GET', KEYS[i]) == ARGV[1] then
    redis.call('DEL', KEYS[i])
  end
end
return 1
"""


def answer_key(p: Partition, jid: str) -> str:
    """The partition's copy of a cancel's answer (step 2)."""
    return f"{p.prefix}cancelled:{jid}"


def _never_written(p: Partition, name: str) -> str:
    return f"{p.prefix}cancel-unused:{name}"


def remove(
    home: redis.Redis,
    scripts: Scripts,
    p: Partition,
    jid: str,
    place_key: str,
    is_set: bool,
    raw: str,
    kept: str,
    keep_s: float,
) -> bool:
    """Step 2: take the job off `place_key` in partition `p` and count it; True when it was there.
    A lost reply is settled by the partition's answer key; still unknown, the error is raised."""
    day = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
    names = [_never_written(p, "record"), place_key, _never_written(p, "status"), answer_key(p, jid)]
    names += [shards.stat(p, "cancelled"), shards.stat_day(p, "cancelled", day)]
    args = [jid, "remove", "z" if is_set else "l", raw, time.time(), kept, keep_s, outcomes.DAY_COUNTER_TTL_S]
    holder = set_fanout.client_of(home, p)
    try:
        reply = scripts.run("cancel", names, args, client=holder)
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        if _read(holder, answer_key(p, jid)) is None:
            raise
        log.warning("cancel_reply_lost_but_removed", jid=jid, partition=str(p), error=str(exc))
        return True
    if isinstance(reply, list) and len(reply) == 2 and reply[0] == "uncounted":
        log.error("outcome_not_counted", outcome="cancelled", jid=jid, keys=[reply[1]])
        key_guard.request(home, str(reply[1]))
        return True
    wrong = key_guard.script_wrong_type(reply)
    if wrong is not None:
        key_guard.request(home, str(wrong))
        raise key_guard.WrongTypeKey(str(wrong), None)
    return bool(int(reply))


def finish(home: redis.Redis, jid: str, kept: str, keep_s: float, locks: list[str]) -> None:
    """Step 3, in the home slot (idempotent)."""
    names = [keys.CANCELS, keys.status(jid), keys.cancelled(jid), *locks]
    home.eval(_FINISH, len(names), *names, jid, kept, int(keep_s), str(time.time()))


def _read(client: redis.Redis, key: str) -> str | None:
    try:
        value: Any = client.get(key)
    except redis.RedisError:
        return None
    return str(value) if value is not None else None


def earlier(home: redis.Redis, jid: str) -> str | None:
    """A partition's answer for `jid` (step 2 ran), read from every partition at once; None when no
    partition has one."""
    parts = set_fanout.partitions(home)
    replies = set_fanout.fan_out(
        home, parts, lambda pipe, p: pipe.get(answer_key(p, jid)), raise_on_error=False
    )
    for (value,) in replies:
        if isinstance(value, str):
            return value
    return None
