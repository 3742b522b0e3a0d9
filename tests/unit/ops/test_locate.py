"""ops/locate.py and store/lua/locate.lua against a real Redis: a job found in each place it can be
(a queue with its place in line, the retry, scheduled and dead sets, a running process, only its
status), candidates whose text names the jid but whose payload is another job's left out, bounded
queue searches, keys of the wrong type skipped, and one script call whatever the sets' sizes."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import redis

from cogworker import codec
from cogworker.ops import locate
from cogworker.ops import sets as set_ops
from cogworker.store import keys
from cogworker.store.scripts import Scripts


def job(jid: str, **fields: Any) -> dict[str, Any]:
    return {
        "class": "demo_jobs.record",
        "args": [jid],
        "kwargs": {},
        "jid": jid,
        "queue": "default",
        **fields,
    }


def push(r: redis.Redis, queue: str, *payloads: dict[str, Any] | str) -> None:
    for payload in payloads:
        r.lpush(keys.queue(queue), payload if isinstance(payload, str) else codec.dumps(payload))
    r.sadd(keys.QUEUES, queue)


def find(r: redis.Redis, jid: str) -> locate.Location:
    return locate.locate(r, Scripts(r), jid)


def live_process(r: redis.Redis, identity: str, running: dict[str, dict[str, Any]]) -> None:
    """A process record as a worker's beat writes it: presence hash, registry entry, work hash."""
    info = {
        "hostname": "box",
        "pid": 4242,
        "queues": ["default"],
        "concurrency": 2,
        "started_at": time.time(),
    }
    r.hset(keys.process(identity), mapping={"info": json.dumps(info), "beat": repr(time.time()), "busy": "1"})
    r.expire(keys.process(identity), 60)
    r.sadd(keys.PROCESSES, identity)
    if running:
        r.hset(keys.work(identity), mapping={t: json.dumps(item) for t, item in running.items()})


def test_a_queued_job_is_found_with_its_queue_and_place_in_line(r: redis.Redis) -> None:
    push(r, "mail", job("first"), job("target", queue="mail"), job("third"), job("fourth"))
    push(r, "other", job("x"))
    where = find(r, "target")
    [queued] = where.queued
    assert (queued.queue, queued.size, queued.ahead) == ("mail", 4, 1)  # "first" is popped before it
    assert queued.payload["jid"] == "target" and where.payload == queued.payload
    assert where.found and where.entries == [] and where.running == []


def test_set_entries_are_found_with_the_key_of_their_entry_page(r: redis.Redis) -> None:
    r.zadd(keys.RETRY, {codec.dumps(job("r1", error_class="ValueError")): 1700000000.25})
    r.zadd(keys.SCHEDULE, {codec.dumps(job("s1")): 1800000000.0})
    r.zadd(keys.DEAD, {codec.dumps(job("d1")): 1e-05, codec.dumps(job("other")): 5.0})
    [retry] = find(r, "r1").entries
    assert (retry.set, retry.key, retry.error_class) == ("retry", "1700000000.25-r1", "ValueError")
    assert [e.key for e in find(r, "s1").entries] == ["1800000000.0-s1"]
    [dead] = find(r, "d1").entries
    assert dead.set == "dead" and dead.key == "1e-05-d1"
    # The key names the entry for ops/sets too: the entry page finds it by its exact score.
    score, ref = set_ops.parse_key(dead.key) or (0.0, "")
    assert set_ops.get(r, "dead", ref, score).raw == dead.raw


def test_a_running_job_is_found_in_its_process_work_hash(r: redis.Redis) -> None:
    summary = {
        "queue": "default",
        "run_at": time.time() - 3,
        "jid": "busy1",
        "class": "demo_jobs.sleepy",
        "args": [1],
    }
    live_process(r, "box:4242:abc", {"t1": summary, "t2": {**summary, "jid": "someone-else"}})
    where = find(r, "busy1")
    [running] = where.running
    assert (running.identity, running.hostname, running.pid, running.job.thread) == (
        "box:4242:abc",
        "box",
        4242,
        "t1",
    )
    assert running.job.running_for_s is not None and running.job.running_for_s >= 3
    # A dead process's work hash is not "running": its presence hash is gone.
    r.delete(keys.process("box:4242:abc"))
    assert find(r, "busy1").running == []


def test_status_only_and_not_found(r: redis.Redis) -> None:
    r.hset(
        keys.status("done1"), mapping={"status": "complete", "class": "demo_jobs.record", "queue": "default"}
    )
    r.expire(keys.status("done1"), 600)
    where = find(r, "done1")
    assert not where.found and where.status["status"] == "complete"
    assert where.status_ttl_s is not None and 590 < where.status_ttl_s <= 600
    nothing = find(r, "nobody")
    assert (
        not nothing.found
        and nothing.status == {}
        and nothing.status_ttl_s is None
        and nothing.payload is None
    )


def test_text_naming_the_jid_elsewhere_is_not_a_hit_and_other_json_spacing_is(r: redis.Redis) -> None:
    decoy = job("decoy", args=['"jid":"target"'], kwargs={"ref": "target"})
    push(r, "default", decoy, json.dumps(job("target")))  # json.dumps writes `"jid": "target"`
    r.zadd(
        keys.DEAD,
        {codec.dumps(decoy): 1.0, codec.dumps(job("target-2")): 2.0, codec.dumps(job("xtarget")): 3.0},
    )
    where = find(r, "target")
    assert [q.payload["jid"] for q in where.queued] == ["target"]
    assert where.entries == []


def test_a_queue_is_searched_up_to_the_cap_and_says_so(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(locate, "QUEUE_SCAN_CAP", 10)
    push(r, "long", job("oldest"), *(job(f"j{n}") for n in range(20)))
    where = find(r, "oldest")
    assert where.queued == [] and where.unsearched == {"long": 21}
    assert [q.ahead for q in find(r, "j19").queued] == [20]  # the newest end is searched first


def test_the_queue_its_status_names_is_searched_first_within_the_budget(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(locate, "QUEUE_SCAN_BUDGET", 5)
    push(r, "aaa", *(job(f"a{n}") for n in range(5)))
    push(r, "zzz", job("late", queue="zzz"))
    assert find(r, "late").unsearched == {"zzz": 1}
    r.hset(keys.status("late"), mapping={"status": "queued", "queue": "zzz"})
    where = find(r, "late")
    assert [q.queue for q in where.queued] == ["zzz"] and where.unsearched == {"aaa": 5}


def test_keys_of_the_wrong_type_are_skipped_and_named(r: redis.Redis) -> None:
    r.set(keys.DEAD, "not a zset")
    r.hset(keys.queue("broken"), "a", "b")
    r.sadd(keys.QUEUES, "broken")
    r.zadd(keys.RETRY, {codec.dumps(job("j1")): 1.0})
    where = find(r, "j1")
    assert [e.set for e in where.entries] == ["retry"]
    assert sorted(where.wrong_type) == [keys.DEAD, keys.queue("broken")]


def test_valid_jids() -> None:
    assert locate.valid_jid("0123456789abcdef01234567") and locate.valid_jid("my-job.1:a_b")
    for bad in ("", "*", "a*b", "a b", 'a"b', "a\\b", "-lead", "x" * 101, "<script>"):
        assert not locate.valid_jid(bad), bad


def _commands(r: redis.Redis) -> dict[str, int]:
    return {name: int(value["calls"]) for name, value in r.info("commandstats").items()}


def _locate_commands(r: redis.Redis, jid: str) -> dict[str, int]:
    scripts = Scripts(r)
    locate.locate(r, scripts, jid)  # warm: loads the script
    before = _commands(r)
    locate.locate(r, scripts, jid)
    after = _commands(r)
    delta = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
    delta.pop("cmdstat_info", None)  # this test's own INFO
    return delta


# What the script runs inside Redis (INFO commandstats counts those too): not sent by the caller.
IN_SCRIPT = {
    "cmdstat_type",
    "cmdstat_zcard",
    "cmdstat_zrange",
    "cmdstat_zscore",
    "cmdstat_llen",
    "cmdstat_lrange",
}


def fill_dead(r: redis.Redis, count: int, start: int = 0) -> None:
    pipe = r.pipeline(transaction=False)
    for n in range(start, start + count):
        pipe.zadd(keys.DEAD, {codec.dumps(job(f"dead{n:06d}", error_message="x" * 100)): float(n)})
    pipe.execute()


def test_locating_costs_the_same_commands_at_100_and_at_5000_dead_entries(r: redis.Redis) -> None:
    push(r, "default", job("q1"))
    fill_dead(r, 100)
    small = _locate_commands(r, "dead000050")
    fill_dead(r, 4900, start=100)
    big = _locate_commands(r, "dead004000")
    assert small == big
    assert small["cmdstat_evalsha"] == 1
    # What the caller sends stays the same past one script slice too (the script reads 5,000
    # elements per ZRANGE inside Redis).
    sent = {k: v for k, v in small.items() if k not in IN_SCRIPT}
    fill_dead(r, 15000, start=5000)
    bigger = _locate_commands(r, "dead019000")
    assert {k: v for k, v in bigger.items() if k not in IN_SCRIPT} == sent
    assert bigger["cmdstat_zrange"] == 4
