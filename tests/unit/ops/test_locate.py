"""ops/locate.py and store/lua/locate.lua against a real Redis: a job found in each place it can be
(a queue with its place in line, the retry, scheduled and dead sets, a running process, only its
status), candidates whose text names the jid but whose payload is another job's left out, keys of
the wrong type skipped, the search order the status hash leads, and the search in bounded stretches:
resumed from a cursor to its end, not fooled by entries arriving between stretches, and costing a
bounded number of script calls and in-script commands with 100 or 50,000 dead entries."""

from __future__ import annotations

import json
import time
from typing import Any

import redis

from cogworker import codec
from cogworker.ops import locate
from cogworker.ops import sets as set_ops
from cogworker.store import keys
from cogworker.store.scripts import Scripts
from tests.support.set_entries import job


def push(r: redis.Redis, queue: str, *payloads: dict[str, Any] | str) -> None:
    for payload in payloads:
        r.lpush(keys.queue(queue), payload if isinstance(payload, str) else codec.dumps(payload))
    r.sadd(keys.QUEUES, queue)


def find(r: redis.Redis, jid: str, cursor: locate.Cursor | None = None) -> locate.Location:
    return locate.locate(r, Scripts(r), jid, cursor)


def searched(r: redis.Redis, jid: str) -> locate.Search:
    where = find(r, jid)
    assert where.search is not None
    return where.search


def fill_dead(r: redis.Redis, count: int, start: int = 0, prefix: str = "dead") -> None:
    """`count` dead entries of about 300 bytes, scored by number (higher: newer), in big ZADDs."""
    pipe = r.pipeline(transaction=False)
    for chunk in range(start, start + count, 5000):
        numbers = range(chunk, min(start + count, chunk + 5000))
        mapping = {codec.dumps(job(f"{prefix}{n:06d}", error_message="x" * 150)): float(n) for n in numbers}
        pipe.zadd(keys.DEAD, mapping)  # type: ignore[arg-type]
    pipe.execute()


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
    assert where.search is not None
    [queued] = where.search.queued
    assert (queued.queue, queued.size, queued.ahead) == ("mail", 4, 1)  # "first" is popped before it
    assert queued.payload["jid"] == "target" and where.payload == queued.payload
    assert where.found and where.search.entries == [] and where.running == []


def test_set_entries_are_found_with_the_key_of_their_entry_page(r: redis.Redis) -> None:
    r.zadd(keys.RETRY, {codec.dumps(job("r1", error_class="ValueError")): 1700000000.25})
    r.zadd(keys.SCHEDULE, {codec.dumps(job("s1")): 1800000000.0})
    r.zadd(keys.DEAD, {codec.dumps(job("d1")): 1e-05, codec.dumps(job("other")): 5.0})
    [retry] = searched(r, "r1").entries
    assert (retry.set, retry.key, retry.error_class) == ("retry", "1700000000.25-r1", "ValueError")
    assert [e.key for e in searched(r, "s1").entries] == ["1800000000.0-s1"]
    [dead] = searched(r, "d1").entries
    assert dead.set == "dead" and dead.key == "1e-05-d1"
    # The key names the entry for ops/sets too: the entry page finds it by its exact score.
    score, ref = set_ops.parse_key(dead.key) or (0.0, "")
    assert set_ops.get(r, "dead", ref, score).raw == dead.raw


def test_a_running_job_is_found_in_its_process_work_hash_without_a_search(r: redis.Redis) -> None:
    summary = {"queue": "default", "run_at": time.time() - 3, "jid": "busy1", "class": "x.y", "args": [1]}
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
    assert where.search is None and where.skipped == "running" and where.found
    # Asked for all the same (the page's "Search them anyway"), the search runs.
    anyway = find(r, "busy1", where.start)
    assert anyway.search is not None and anyway.search.next is None and anyway.running
    # A dead process's work hash is not "running": its presence hash is gone.
    r.delete(keys.process("box:4242:abc"))
    assert find(r, "busy1").running == []


def test_status_only_and_not_found(r: redis.Redis) -> None:
    r.hset(keys.status("done1"), mapping={"status": "complete", "class": "x.y", "queue": "default"})
    r.expire(keys.status("done1"), 600)
    where = find(r, "done1")
    assert not where.found and where.status["status"] == "complete"
    assert where.search is None and where.skipped == "complete"  # finished: nothing to search
    assert where.status_ttl_s is not None and 590 < where.status_ttl_s <= 600
    nothing = find(r, "nobody")
    assert not nothing.found and nothing.status == {} and nothing.status_ttl_s is None
    assert nothing.payload is None and nothing.search is not None and nothing.search.next is None


def test_text_naming_the_jid_elsewhere_is_not_a_hit_and_other_json_spacing_is(r: redis.Redis) -> None:
    decoy = job("decoy", args=['"jid":"target"'], kwargs={"ref": "target"})
    push(r, "default", decoy, json.dumps(job("target")))  # json.dumps writes `"jid": "target"`
    r.zadd(
        keys.DEAD,
        {codec.dumps(decoy): 1.0, codec.dumps(job("target-2")): 2.0, codec.dumps(job("xtarget")): 3.0},
    )
    found = searched(r, "target")
    assert [q.payload["jid"] for q in found.queued] == ["target"]
    assert found.entries == []


def test_keys_of_the_wrong_type_are_skipped_and_named(r: redis.Redis) -> None:
    r.set(keys.DEAD, "not a zset")
    r.hset(keys.queue("broken"), "a", "b")
    r.sadd(keys.QUEUES, "broken")
    assert sorted(searched(r, "j1").wrong_type) == [keys.DEAD, keys.queue("broken")]
    push(r, "zzz", job("j1"))
    assert [q.queue for q in searched(r, "j1").queued] == ["zzz"]  # searched past them


def test_valid_jids() -> None:
    assert locate.valid_jid("0123456789abcdef01234567") and locate.valid_jid("my-job.1:a_b")
    for bad in ("", "*", "a*b", "a b", 'a"b', "a\\b", "-lead", "x" * 101, "<script>"):
        assert not locate.valid_jid(bad), bad


def test_the_status_hash_then_the_smaller_sets_lead_the_search_order() -> None:
    queues = ["aaa", "mail"]
    sizes = {"retry": 10, "scheduled": 5, "dead": 100_000}
    assert locate.search_order((), queues) == ["retry", "scheduled", "dead", "queue:aaa", "queue:mail"]
    # Without a status: the sets smallest first (ties in their usual order), then the queues.
    assert locate.first_places({}, queues, sizes) == ("scheduled", "retry", "dead")
    assert locate.first_places({}, queues, {}) == ("retry", "scheduled", "dead")
    queued = locate.first_places({"status": "queued", "queue": "mail"}, queues, sizes)
    assert queued == ("queue:mail", "scheduled", "retry", "dead")
    assert locate.search_order(queued, queues) == ["queue:mail", "scheduled", "retry", "dead", "queue:aaa"]
    assert locate.first_places({"status": "failed", "queue": "mail"}, queues, sizes)[0] == "dead"
    retrying = locate.first_places({"status": "retrying", "queue": "mail"}, queues, sizes)
    assert retrying[:2] == ("retry", "queue:mail")
    # A queue no one knows is not a place; nor is anything a hand-edited link names.
    assert locate.first_places({"status": "queued", "queue": "gone"}, queues, sizes)[0] == "scheduled"
    assert locate.search_order(("bogus", "dead", "dead"), queues)[:2] == ["dead", "retry"]


def test_a_search_begun_keeps_its_order_when_the_sizes_change(r: redis.Redis) -> None:
    r.zadd(keys.RETRY, {codec.dumps(job(f"r{n}")): n for n in range(5)})
    fill_dead(r, 300)
    start = find(r, "nobody").start
    assert start == locate.Cursor("scheduled", 0, ("scheduled", "retry", "dead"))
    r.zadd(keys.SCHEDULE, {codec.dumps(job(f"s{n}")): n for n in range(500)})
    assert find(r, "nobody").start.first == ("retry", "dead", "scheduled")  # a new search: new order
    resumed = find(r, "nobody", locate.Cursor("retry", 2, start.first))
    assert resumed.search is not None and resumed.search.order[:3] == ["scheduled", "retry", "dead"]


def stretches(
    r: redis.Redis, jid: str, cursor: locate.Cursor | None = None, **limits: Any
) -> list[locate.Search]:
    """The search run to its end (or its hit) one bounded stretch at a time, as the page's
    "Continue searching" links run it."""
    scripts, queues, done = Scripts(r), sorted(str(q) for q in r.smembers(keys.QUEUES)), []
    cursor = cursor or locate.Cursor("retry")
    while True:
        step = locate.search(r, scripts, jid, cursor, queues, **limits)
        done.append(step)
        if step.found or step.next is None:
            return done
        assert len(done) < 100, "the search does not end"
        cursor = step.next


def test_the_status_named_queue_is_searched_before_big_sets(r: redis.Redis) -> None:
    fill_dead(r, 300)
    r.zadd(keys.RETRY, {codec.dumps(job(f"r{n}")): n for n in range(300)})
    push(r, "zzz", job("late", queue="zzz"))
    limits = {"max_calls": 1, "slice_size": 100}
    assert not find_with(r, "late", limits).found  # retry first: one call of 100 doesn't get there
    r.hset(keys.status("late"), mapping={"status": "queued", "queue": "zzz"})
    assert [q.queue for q in find_with(r, "late", limits).queued] == ["zzz"]


def find_with(r: redis.Redis, jid: str, limits: dict[str, Any]) -> locate.Search:
    status = {str(k): str(v) for k, v in r.hgetall(keys.status(jid)).items()}
    queues = sorted(str(q) for q in r.smembers(keys.QUEUES))
    sizes = {name: int(r.zcard(key)) for name, key in keys.job_sets().items()}
    first = locate.first_places(status, queues, sizes)
    start = locate.Cursor(locate.search_order(first, queues)[0], 0, first)
    return locate.search(r, Scripts(r), jid, start, queues, **limits)


def test_a_search_resumed_stretch_by_stretch_reaches_the_oldest_dead_entry(r: redis.Redis) -> None:
    fill_dead(r, 1000)
    push(r, "default", job("q1"))
    steps = stretches(r, "dead000000", max_calls=2, slice_size=100)
    # Newest first: the oldest entry is the last read, after at least five requests of two calls
    # (visiting a key costs the budget a little too), each further on than the one before.
    assert len(steps) >= 5 and all(s.calls <= 2 and s.read <= 200 for s in steps)
    progress = [s.searched for s in steps[:-1]]
    assert progress == sorted(set(progress)) and progress[0] > 100
    assert steps[-1].found and [e.jid for e in steps[-1].entries] == ["dead000000"]
    # A jid found nowhere: the stretches cover every element once, to the end.
    misses = stretches(r, "nobody", max_calls=3, slice_size=100)
    assert sum(s.read for s in misses) == 1001 and misses[-1].next is None
    assert misses[-1].searched == misses[-1].total == 1001


def test_the_newest_dead_entry_is_in_the_first_stretch(r: redis.Redis) -> None:
    fill_dead(r, 1000)
    [step] = stretches(r, "dead000999", max_calls=1, slice_size=100)
    assert step.found and step.calls == 1 and step.read <= 100


def test_entries_arriving_between_stretches_do_not_hide_unread_ones(r: redis.Redis) -> None:
    fill_dead(r, 500)
    scripts = Scripts(r)
    first = locate.search(r, scripts, "dead000300", locate.Cursor("retry"), [], max_calls=1, slice_size=100)
    assert not first.found and first.next is not None
    fill_dead(r, 300, start=1000, prefix="new")  # newer than everything: in front of the cursor
    rest = stretches(r, "dead000300", first.next, max_calls=3, slice_size=100)
    assert [e.jid for e in rest[-1].entries] == ["dead000300"]
    # The 300 arrivals pushed the target from offset 199 to 499: read up to there, not skipped.
    assert first.read + sum(s.read for s in rest) >= 500


def test_a_cursor_naming_no_place_restarts_and_an_offset_past_the_end_moves_on(r: redis.Redis) -> None:
    push(r, "default", job("q1"))
    bogus = find(r, "q1", locate.Cursor("queue:nope", 5))
    assert bogus.search is not None and bogus.search.restarted and bogus.search.queued
    past = find(r, "q1", locate.Cursor("queue:default", 10**9))
    assert past.search is not None and not past.search.restarted
    assert not past.search.found and past.search.next is None


def _commands(r: redis.Redis) -> dict[str, int]:
    return {name: int(value["calls"]) for name, value in r.info("commandstats").items()}


def _locate_commands(r: redis.Redis, jid: str) -> tuple[locate.Location, dict[str, int]]:
    scripts = Scripts(r)
    locate.locate(r, scripts, jid)  # warm: loads the script
    before = _commands(r)
    where = locate.locate(r, scripts, jid)
    after = _commands(r)
    delta = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
    delta.pop("cmdstat_info", None)  # this test's own INFO
    return where, delta


def test_a_request_costs_at_most_its_budget_at_100_and_at_50000_dead_entries(r: redis.Redis) -> None:
    push(r, "default", job("q1"))
    fill_dead(r, 100)
    _, small = _locate_commands(r, "nobody")
    assert small["cmdstat_evalsha"] == 1  # everything fits in one call
    fill_dead(r, 49_900, start=100)
    where, big = _locate_commands(r, "nobody")
    assert where.search is not None and where.search.next is not None  # more than one request's worth
    calls = big["cmdstat_evalsha"]
    assert calls == where.search.calls and 1 <= calls <= locate.MAX_CALLS
    assert where.search.read <= calls * locate.SLICE
    places = len(where.search.order)  # 3 sets and 1 queue
    # Inside the script: a length and a range per place visited (at most every place, each call),
    # ZSCORE per candidate; the request's own pipelines read the sets' and each place's length.
    assert big.get("cmdstat_zrevrange", 0) + big.get("cmdstat_lrange", 0) <= calls * places
    assert big.get("cmdstat_zcard", 0) + big.get("cmdstat_llen", 0) <= 3 + places + calls * places
    assert "cmdstat_zscore" not in big and "cmdstat_zrange" not in big
    # What the client sends besides the script calls is the same at 100 and 50,000 entries.
    in_script = {"cmdstat_zcard", "cmdstat_llen", "cmdstat_zrevrange", "cmdstat_lrange", "cmdstat_evalsha"}
    assert {k: v for k, v in big.items() if k not in in_script} == {
        k: v for k, v in small.items() if k not in in_script
    }
