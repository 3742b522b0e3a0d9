"""on_death hooks and retry filters with real `cogworker run` workers (tests/apps/death_jobs.py): each
path to dead calls the hooks once however many workers run, a hook that raises harms nothing, and
retry_on / discard_on / retry_in decide where a failure goes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from typing import Any

import death_jobs
import demo_jobs
import redis

from cogworker.store import keys
from tests.support.daemon_env import QUICK_RECOVERY, clean_env
from tests.support.redis_server import wait_until
from tests.support.workers import Worker, WorkerPool

HOOKS = {"COGWORKER_REQUIRE": "death_jobs", "COGWORKER_POLL_INTERVAL_S": "0.1"}


def deaths(r: redis.Redis) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in r.lrange("test:deaths", 0, -1)]


def entry_in(r: redis.Redis, set_key: str, jid: str) -> tuple[dict[str, Any], float] | None:
    for raw, score in r.zrange(set_key, 0, -1, withscores=True):
        entry = json.loads(raw) if raw.startswith("{") else {}
        if entry.get("jid") == jid:
            return entry, score
    return None


def make_due(r: redis.Redis, jid: str) -> None:
    for raw in r.zrange(keys.RETRY, 0, -1):
        if raw.startswith("{") and json.loads(raw).get("jid") == jid:
            r.zadd(keys.RETRY, {raw: 0}, xx=True)


def stop_all(*workers: Worker) -> None:
    """A stop waits for the hooks being called: after it, no call is still to come."""
    for worker in workers:
        assert worker.stop() == 0, worker.log_text()[-2000:]


def run_cli(url: str, *argv: str) -> subprocess.CompletedProcess[str]:
    env = clean_env()
    env["COGWORKER_REDIS_URL"] = url
    return subprocess.run(
        [sys.executable, "-m", "cogworker", *argv], env=env, capture_output=True, text=True, timeout=30
    )


def test_every_path_to_dead_calls_the_hooks_once_with_two_workers(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    exhausted = death_jobs.fails.perform_async("exhausted")
    no_retry = death_jobs.fails_at_once.perform_async("no-retry")
    discarded = death_jobs.discarded.perform_async("discard")
    mismatch = death_jobs.wrong_error.perform_async("mismatch")
    to_kill = death_jobs.right_error.perform_async("to-kill")
    r.lpush(keys.queue("default"), "not json at all")  # the processor files it in dead
    r.zadd(keys.RETRY, {"garbage in the retry set": 0})  # the poller buries it
    first, second = workers.start(**HOOKS), workers.start(**HOOKS)

    wait_until(lambda: entry_in(r, keys.RETRY, exhausted), timeout=15, message="the first failure in retry")
    make_due(r, exhausted)
    # right_error is retried (ConnectionError is in its retry_on); an operator kills it from retry.
    wait_until(lambda: entry_in(r, keys.RETRY, to_kill), timeout=15, message="the job to kill in retry")
    killed = run_cli(workers.redis_url, "retry", "kill", str(to_kill), "--yes")
    assert killed.returncode == 0, killed.stderr

    wait_until(lambda: len(deaths(r)) >= 7, timeout=20, message="seven hook calls")
    wait_until(lambda: r.llen(keys.DEATHS) == 0, timeout=5, message="every notice popped")
    stop_all(first, second)
    calls = deaths(r)
    assert len(calls) == 7, calls
    by_jid = {c["jid"]: c for c in calls if c["jid"]}
    assert {jid: by_jid[jid]["cause"] for jid in (exhausted, no_retry, discarded, mismatch, to_kill)} == {
        exhausted: "failed",
        no_retry: "failed",
        discarded: "failed",
        mismatch: "failed",
        to_kill: "killed",
    }
    assert (
        by_jid[exhausted]["error_class"] == "ValueError" and by_jid[exhausted]["error_message"] == "exhausted"
    )
    assert by_jid[discarded]["error_class"] == "KeyError"
    assert by_jid[to_kill]["error_class"] == "ConnectionError"  # a killed job keeps its last failure
    unreadable = sorted(c["raw"] for c in calls if c["cause"] == "unreadable")
    assert unreadable == ["garbage in the retry set", "not json at all"]
    assert {c["pid"] for c in calls} <= {first.pid, second.pid}
    assert r.zcard(keys.DEAD) == 7
    # Filtered to dead at once: not retried, and the dead entry says why.
    for jid, note in ((discarded, "matches discard_on"), (mismatch, "is not in retry_on")):
        entry, _ = entry_in(r, keys.DEAD, jid) or ({}, 0.0)
        assert entry["retry_count"] == 0
        assert any(note in n for n in entry["cogworker_notes"]), entry


def test_a_raising_hook_is_logged_and_the_next_hook_still_runs(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    jid = death_jobs.fails_at_once.perform_async("hook-raises")
    worker = workers.start(**HOOKS)
    wait_until(lambda: deaths(r), timeout=15, message="the second hook's call")
    assert [(c["jid"], c["cause"]) for c in deaths(r)] == [(jid, "failed")]
    failed = wait_until(lambda: worker.events_named("death_hook_failed"), timeout=5, message="the log line")
    assert failed[0]["hook"] == "death_jobs.broken_hook"
    assert failed[0]["jid"] == jid
    assert "RuntimeError: the hook broke" in failed[0]["error"]
    assert entry_in(r, keys.DEAD, jid) is not None  # the job stays in dead
    assert worker.proc.poll() is None


def test_a_poison_pill_calls_the_hooks_once(r: redis.Redis, configured: object, workers: WorkerPool) -> None:
    jid = death_jobs.pill.perform_async("pill")
    # Two recoverers with hooks, reading another queue: they bury the pill and pop its notice.
    recoverers = [
        workers.start(COGWORKER_QUEUES="other", COGWORKER_MAX_ORPHANINGS="1", **HOOKS, **QUICK_RECOVERY)
        for _ in range(2)
    ]
    for death in range(2):
        victim = workers.start(COGWORKER_MAX_ORPHANINGS="1", **HOOKS, **QUICK_RECOVERY)
        assert victim.proc.wait(timeout=15) == -signal.SIGKILL
        assert r.llen("test:started") == death + 1
        if death == 0:
            # With a limit of 1 its first orphaning makes it a suspect, which the next victim runs alone.
            wait_until(lambda: r.llen(keys.suspects("default")) == 1, timeout=15, message="requeued once")
    wait_until(lambda: deaths(r), timeout=20, message="the hook's call")
    wait_until(lambda: r.llen(keys.DEATHS) == 0, timeout=5, message="the notice popped")
    stop_all(*recoverers)
    calls = deaths(r)
    assert [(c["jid"], c["cause"], c["error_class"]) for c in calls] == [
        (jid, "poison_pill", "cogworker.ProcessDied")
    ]
    assert calls[0]["pid"] in {w.pid for w in recoverers}


def test_retry_in_sets_the_delay_and_a_bad_one_falls_back_to_the_backoff(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    slow = death_jobs.slow_retry.perform_async("slow")
    bad = death_jobs.bad_delay.perform_async("bad")
    raising = death_jobs.raising_delay.perform_async("raising")
    worker = workers.start(**HOOKS)
    found = {
        jid: wait_until(lambda j=jid: entry_in(r, keys.RETRY, j), timeout=15, message=f"{jid} in retry")
        for jid in (slow, bad, raising)
    }
    entry, score = found[slow]
    assert score == entry["failed_at"] + 1000  # retry_in(0, exc) = 1000 + count
    for jid in (bad, raising):
        entry, score = found[jid]
        assert entry["failed_at"] + 15 <= score <= entry["failed_at"] + 24  # the default backoff at count 0
    assert worker.events_named("retry_in_bad_value")[0]["jid"] == bad
    failed = worker.events_named("retry_in_failed")
    assert failed[0]["jid"] == raising and "ZeroDivisionError" in failed[0]["error"]
    assert r.zcard(keys.DEAD) == 0 and deaths(r) == []


def test_notices_stay_bounded_without_hooks_and_wait_for_a_worker_with_hooks(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    jids = [demo_jobs.boom_once.perform_async(f"n{i}") for i in range(5)]
    plain = workers.start(COGWORKER_DEATH_NOTICES_MAX="3")  # demo_jobs only: no hooks
    wait_until(lambda: r.zcard(keys.DEAD) == 5, timeout=15, message="five dead jobs")
    assert r.llen(keys.DEATHS) == 3  # capped: the newest three
    stop_all(plain)
    kept = [json.loads(text)["job"]["jid"] for text in r.lrange(keys.DEATHS, 0, -1)]
    with_hooks = workers.start(COGWORKER_REQUIRE="death_jobs,demo_jobs")
    wait_until(lambda: len(deaths(r)) == 3, timeout=15, message="the three notices handled")
    stop_all(with_hooks)
    assert sorted(c["jid"] for c in deaths(r)) == sorted(kept)
    assert set(kept) <= set(jids) and r.llen(keys.DEATHS) == 0
