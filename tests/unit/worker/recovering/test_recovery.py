"""Orphan recovery, driven in-process against a real Redis: the atomic death check, order, orphan
counting, poison pills, unread queues, and dead entries completed after a failure."""

from __future__ import annotations

import json
import time

import redis
import structlog

from cogworker import codec
from cogworker.settings import load_settings
from cogworker.store import job_keys, keys
from tests.support import components
from tests.support.redis_server import RedisServer

OWNER = "host:123:dead"


def job(jid: str, queue: str = "default", **extra: object) -> str:
    return codec.dumps(
        {"class": "demo_jobs.record", "args": [jid], "kwargs": {}, "jid": jid, "queue": queue, **extra}
    )


def fill_in_progress(r: redis.Redis, jobs: list[str], identity: str = OWNER) -> None:
    # As LMOVE ... LEFT leaves them: the newest at the head.
    for raw in jobs:
        r.lpush(keys.in_progress(identity), raw)
    r.sadd(keys.IN_PROGRESS_IDENTITIES, identity)


def test_a_live_owner_keeps_its_jobs(r: redis.Redis, settings) -> None:
    fill_in_progress(r, [job("a")])
    r.hset(keys.process(OWNER), "beat", 1)
    parts = components.build(settings)
    assert parts.recovery.recover_orphans() == 0
    assert r.llen(keys.in_progress(OWNER)) == 1


def test_a_recent_last_beat_protects_an_owner_without_presence(r: redis.Redis, settings) -> None:
    fill_in_progress(r, [job("a")])
    now = int(r.time()[0])
    r.hset(keys.LAST_BEAT, OWNER, now - 10)  # silent 10 s; the threshold is 300 s
    parts = components.build(settings)
    assert parts.recovery.recover_orphans() == 0
    assert r.llen(keys.in_progress(OWNER)) == 1


def test_a_dead_owners_jobs_go_back_oldest_first(r: redis.Redis, settings) -> None:
    fill_in_progress(r, [job("old"), job("mid"), job("new")])
    r.lpush(keys.queue("default"), job("waiting"))
    r.hset(keys.LAST_BEAT, OWNER, int(r.time()[0]) - 301)
    parts = components.build(settings)
    assert parts.recovery.recover_orphans() == 3
    # Popped from the right: the recovered jobs come first, oldest first, then what was waiting.
    popped = [json.loads(r.rpop(keys.queue("default")))["jid"] for _ in range(4)]
    assert popped == ["old", "mid", "new", "waiting"]
    assert r.exists(keys.in_progress(OWNER)) == 0
    assert not r.sismember(keys.IN_PROGRESS_IDENTITIES, OWNER)
    assert r.get(keys.orphanings("old")) == "1"
    assert 0 < r.ttl(keys.orphanings("old")) <= 7 * 24 * 3600


def test_boot_scan_finds_lists_no_registry_names(r: redis.Redis, settings) -> None:
    r.lpush(keys.in_progress("legacy:1:x"), job("lost"))
    parts = components.build(settings)
    assert parts.recovery.recover_orphans(scan=False) == 0
    assert parts.recovery.recover_orphans(scan=True) == 1


def test_unreadable_payloads_go_to_the_default_queue(r: redis.Redis, settings) -> None:
    fill_in_progress(r, ["%%garbage%%", job("x", queue="mailers")])
    parts = components.build(settings)
    parts.recovery.requeue_dead(OWNER)
    assert r.lrange(keys.queue("default"), 0, -1) == ["%%garbage%%"]
    assert r.llen(keys.queue("mailers")) == 1


def test_poison_pill_goes_to_dead_and_releases_its_locks(r: redis.Redis, settings) -> None:
    s = load_settings(redis_url=settings.redis_url, max_orphanings=2)
    parts = components.build(s)
    pill = job("pill", unique="until_executed")
    from cogworker.store.locks import held_locks

    [(lock_key, owner)] = held_locks(codec.loads(pill))
    r.set(lock_key, owner)
    for round_ in range(3):
        fill_in_progress(r, [pill])
        result = parts.recovery.requeue_dead(OWNER)
        if round_ < 2:
            assert result.moved == 1
            # Its second orphaning makes it a suspect, to be run alone.
            assert r.rpop(keys.suspects("default") if round_ else keys.queue("default")) == pill
        else:
            assert result.moved == 0 and result.buried == [pill]
    [entry] = r.zrange(keys.DEAD, 0, -1)
    dead = json.loads(entry)
    assert dead["jid"] == "pill"
    assert dead["error_class"] == "cogworker.ProcessDied"
    assert "more than 2 times" in dead["error_message"]
    assert r.exists(lock_key) == 0
    assert r.exists(keys.orphanings("pill")) == 0


def test_a_dead_entry_left_raw_by_an_outage_is_completed_next_pass() -> None:
    server = RedisServer(persistent=True)
    try:
        settings = load_settings(redis_url=server.url, max_orphanings=1)
        parts = components.build(settings)
        pill = job("pill")
        r = server.client()
        fill_in_progress(r, [pill])
        # Redis goes away between the script that files the pill raw and the swap that completes it.
        declared = job_keys.Declared()
        declared.add_jobs([pill], "default")
        job_key_list, job_key_args = declared.keys_and_args()
        reply = parts.scripts.run(
            "requeue",
            [
                keys.in_progress(OWNER),
                keys.process(OWNER),
                keys.LAST_BEAT,
                keys.DEAD,
                keys.QUEUES,
                keys.LIVE_QUEUES,
                keys.CANCELS,
                *job_key_list,
            ],
            ["default", OWNER, "", "1", 60, 0, 120, 60, int(time.time()), 1, "", *job_key_args],
            client=parts.client,
        )
        assert reply[8:] == [pill]
        server.stop()
        parts.recovery.complete_burials([pill])
        assert parts.recovery.pending_burials == 1
        server.start()
        r = server.client()
        assert r.zrange(keys.DEAD, 0, -1) == [pill]  # raw, without its error yet
        parts.recovery.retry_burials()
        assert parts.recovery.pending_burials == 0
        [entry] = r.zrange(keys.DEAD, 0, -1)
        assert json.loads(entry)["error_class"] == "cogworker.ProcessDied"
    finally:
        server.close()


def test_requeue_onto_an_unread_queue_warns(r: redis.Redis, settings) -> None:
    fill_in_progress(r, [job("a", queue="nobody-reads"), job("b", queue="read")])
    r.zadd(keys.LIVE_QUEUES, {"read": int(r.time()[0])})
    parts = components.build(settings)
    with structlog.testing.capture_logs() as logs:
        result = parts.recovery.requeue_dead(OWNER)
    assert result.unlisted == ["nobody-reads"]
    [warning] = [e for e in logs if e["event"] == "requeued_onto_unread_queues"]
    assert warning["queues"] == ["nobody-reads"]
    assert "nobody-reads" in r.smembers(keys.QUEUES)


def test_a_wrong_type_queue_keeps_the_job_for_the_next_pass(r: redis.Redis, settings) -> None:
    r.set(keys.queue("broken"), "not a list")
    fill_in_progress(r, [job("a", queue="broken"), job("b")])
    parts = components.build(settings)
    result = parts.recovery.requeue_dead(OWNER)
    assert result.moved == 1 and result.failed == 1
    assert r.lrange(keys.in_progress(OWNER), 0, -1) == [job("a", queue="broken")]
    assert r.get(keys.orphanings("a")) in (None, "0")


def test_acknowledging_clears_the_orphan_counter(r: redis.Redis, settings) -> None:
    from cogworker.worker.fetching.reliable_fetch import ReliableFetch

    parts = components.build(settings)
    raw = job("a")
    r.lpush(keys.queue("default"), raw)
    r.set(keys.orphanings("a"), 2)
    fetch = ReliableFetch(parts.client, parts.client, parts.scripts, "me:1:1", settings.queue_spec)
    [work] = fetch.fetch(5, []).works
    assert r.lrange(keys.in_progress("me:1:1"), 0, -1) == [raw]
    result = fetch.fetch(0, [(work.raw, "a")])
    assert result.acked == 1
    assert r.exists(keys.orphanings("a")) == 0
    assert r.llen(keys.in_progress("me:1:1")) == 0
    assert r.get(keys.STAT_PROCESSED) == "1"


def test_paused_queues_are_skipped(r: redis.Redis, settings) -> None:
    from cogworker.settings import parse_queues
    from cogworker.worker.fetching.reliable_fetch import ReliableFetch

    parts = components.build(settings)
    r.lpush(keys.queue("a"), job("in-a", queue="a"))
    r.lpush(keys.queue("b"), job("in-b", queue="b"))
    r.sadd(keys.PAUSED, "a")
    fetch = ReliableFetch(parts.client, parts.client, parts.scripts, "me:1:1", parse_queues("a,b"))
    works = fetch.fetch(5, []).works
    assert [w.queue for w in works] == ["b"]
    r.sadd(keys.PAUSED, "b")
    assert fetch.fetch(5, []).all_paused


def test_fetch_reloads_its_script_after_the_script_cache_is_flushed(r: redis.Redis, settings) -> None:
    """The fetch runs on the fetcher's own connection, outside redis-py's script helper; a Redis
    restarted without its script cache must still get the script (EVAL after NOSCRIPT)."""
    from cogworker.worker.fetching.reliable_fetch import ReliableFetch

    parts = components.build(settings)
    fetch = ReliableFetch(parts.client, parts.client, parts.scripts, "me:1:1", settings.queue_spec)
    r.lpush(keys.queue("default"), job("a"), job("b"))
    [first] = fetch.fetch(1, []).works
    r.script_flush()
    result = fetch.fetch(1, [(first.raw, "a")])
    assert result.acked == 1
    assert [w.raw for w in result.works] == [job("b")]
    assert r.lrange(keys.in_progress("me:1:1"), 0, -1) == [job("b")]
    fetch.close()


def test_fetch_from_a_second_thread_while_the_fetcher_holds_its_connection(r: redis.Redis, settings) -> None:
    """A final acknowledgement flush can run while the fetcher thread is still inside a call; it
    goes through the client's pool rather than sharing the fetcher's socket."""
    from cogworker.worker.fetching.reliable_fetch import ReliableFetch

    parts = components.build(settings)
    fetch = ReliableFetch(parts.client, parts.client, parts.scripts, "me:1:1", settings.queue_spec)
    r.lpush(keys.queue("default"), job("a"))
    [work] = fetch.fetch(1, []).works
    with fetch._direct_lock:  # as if the fetcher thread were mid-call
        assert fetch.fetch(0, [(work.raw, "a")]).acked == 1
    assert r.llen(keys.in_progress("me:1:1")) == 0
    assert r.get(keys.STAT_PROCESSED) == "1"
    fetch.close()


def test_a_tracked_poison_pills_status_becomes_failed(r: redis.Redis, settings) -> None:
    """Its last word was "working", written as it started the run that killed its process; buried
    in dead by recovery (outside the middleware chain), it must read "failed", not "working"."""
    s = load_settings(redis_url=settings.redis_url, max_orphanings=1)
    parts = components.build(s)
    pill = job("pill", status=True)
    r.hset(keys.status("pill"), mapping={"status": "working", "class": "demo_jobs.record"})
    for _ in range(2):
        fill_in_progress(r, [pill])
        parts.recovery.requeue_dead(OWNER)
    assert r.zcard(keys.DEAD) == 1 and r.llen(keys.suspects("default")) == 1  # the first requeue's copy
    details = r.hgetall(keys.status("pill"))
    assert details["status"] == "failed"
    assert details["error_class"] == "cogworker.ProcessDied"
    assert 0 < r.pttl(keys.status("pill")) <= s.status_ttl_s * 1000
    untracked = job("quiet")
    for _ in range(2):
        fill_in_progress(r, [untracked])
        parts.recovery.requeue_dead(OWNER)
    assert r.exists(keys.status("quiet")) == 0  # no status written for a job that doesn't track one


def test_a_shared_death_buries_nobody_and_a_death_alone_convicts(r: redis.Redis, settings) -> None:
    """Every death is counted, but one shared with other jobs may be an innocent's beside a pill:
    only a death alone on the list buries. From its second orphaning a job waits on its queue's
    suspects list, to be run alone."""
    parts = components.build(load_settings(redis_url=settings.redis_url, max_orphanings=2))
    pill, innocent = job("pill"), job("innocent")
    for death in range(1, 5):
        fill_in_progress(r, [pill, innocent])
        result = parts.recovery.requeue_dead(OWNER)
        assert (result.moved, result.buried, result.suspects) == (2, [], 0 if death == 1 else 2)
        assert r.get(keys.orphanings("pill")) == str(death)
        r.delete(keys.queue("default"), keys.suspects("default"))
    assert r.zcard(keys.DEAD) == 0
    fill_in_progress(r, [pill])  # run alone, it kills its process again
    assert parts.recovery.requeue_dead(OWNER).buried == [pill]
    [entry] = r.zrange(keys.DEAD, 0, -1)
    assert json.loads(entry)["jid"] == "pill" and r.exists(keys.orphanings("pill")) == 0
    assert r.get(keys.orphanings("innocent")) == "4"  # counted, never buried


def test_a_job_left_for_a_second_pass_shared_its_death(r: redis.Redis, settings) -> None:
    """Python reads a payload with bytes that aren't UTF-8 otherwise than Lua (store/job_keys.py), so
    it is left for a second pass, alone on the list by then: it still shared the death."""
    parts = components.build(load_settings(redis_url=settings.redis_url, max_orphanings=1))
    odd = b'{"class":"x","jid":"odd","queue":"caf\xe9"}'
    r.set(keys.orphanings("odd"), 5)  # long past the limit
    raw_client = redis.Redis.from_url(settings.redis_url)
    raw_client.lpush(keys.in_progress(OWNER), odd, job("other"))
    result = parts.recovery.requeue_dead(OWNER)
    assert (result.moved, result.buried, result.suspects) == (2, [], 2)
    assert raw_client.lrange(keys.suspects("caf").encode() + b"\xe9", 0, -1) == [odd]
    raw_client.close()


def test_a_clean_stop_sends_a_suspect_back_to_its_suspects_list(r: redis.Redis, settings) -> None:
    parts = components.build(settings)
    r.set(keys.orphanings("suspect"), 2)
    fill_in_progress(r, [job("suspect"), job("fresh")])
    result = parts.recovery.requeue(OWNER, if_dead_for=None, count_orphans=False)
    assert (result.moved, result.suspects) == (2, 1)
    assert r.lrange(keys.suspects("default"), 0, -1) == [job("suspect")]
    assert r.lrange(keys.queue("default"), 0, -1) == [job("fresh")]
    assert r.get(keys.orphanings("suspect")) == "2" and r.get(keys.orphanings("fresh")) is None


def test_a_pill_without_a_jid_is_counted_by_its_digest_and_ends_in_dead(r: redis.Redis, settings) -> None:
    """Before, a payload without a jid was requeued for ever, uncounted."""
    parts = components.build(load_settings(redis_url=settings.redis_url, max_orphanings=1))
    pill = codec.dumps({"class": "demo_jobs.record", "args": ["no jid"], "queue": "default"})
    counter = keys.orphanings_raw(job_keys.digest(pill))
    fill_in_progress(r, [pill])
    assert parts.recovery.requeue_dead(OWNER).suspects == 1
    assert r.get(counter) == "1" and r.lrange(keys.suspects("default"), 0, -1) == [pill]
    fill_in_progress(r, [pill])
    assert parts.recovery.requeue_dead(OWNER).buried == [pill]
    [entry] = r.zrange(keys.DEAD, 0, -1)
    assert json.loads(entry)["error_class"] == "cogworker.ProcessDied"
    assert r.exists(counter) == 0
