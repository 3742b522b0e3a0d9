"""Rate limiters in real `cogworker run` processes: a holder SIGKILLed gives its slot back when its
lease ends (not before, not never), over-limit jobs are put back (not failed, not retried) and all
run in the end, and dynamic names hold per name and leave only expiring keys."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter

import limiter_jobs
import pytest
import redis

import cogworker
from cogworker.ops import limiters as limiter_ops
from cogworker.store import keys
from tests.support.redis_server import RedisServer, wait_until
from tests.support.workers import WorkerPool

ENV = {
    "COGWORKER_REQUIRE": "limiter_jobs",
    "COGWORKER_CONCURRENCY": "8",
    "COGWORKER_POLL_INTERVAL_S": "0.2",
    "COGWORKER_LOG_LEVEL": "info",
}


@pytest.fixture(autouse=True)
def _jobs_see_the_test_redis(redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COGWORKER_REDIS_URL", redis_server.url)


def redis_ms(r: redis.Redis) -> float:
    seconds, micros = r.time()
    return seconds * 1000 + micros / 1000


def test_a_holder_killed_with_sigkill_frees_its_slot_when_its_lease_ends(
    workers: WorkerPool, r: redis.Redis, configured: object, redis_server: RedisServer
) -> None:
    worker = workers.start(**ENV)
    limiter_jobs.hold_for_ever.perform_async("holder")
    wait_until(lambda: r.lrange("test:started", 0, -1), timeout=30, message="the holder to start")
    [state] = limiter_ops.show(r, "killable")
    [holder] = state.holders
    assert holder.pid == str(worker.pid) and holder.jid is not None
    lease_end_ms = r.zscore(
        keys.limiter("concurrent", "killable"), r.zrange(keys.limiter("concurrent", "killable"), 0, 0)[0]
    )
    os.killpg(worker.pid, signal.SIGKILL)
    worker.proc.wait(10)
    # The same limiter from another process (the CLI's view too) stays full until the lease ends.
    shown = subprocess.run(
        [sys.executable, "-m", "cogworker", "limiter", "show", "killable", "--json"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "COGWORKER_REDIS_URL": redis_server.url},
    )
    if redis_ms(r) < lease_end_ms:  # else the lease ended while the CLI started (a loaded machine)
        assert shown.returncode == 0, shown.stderr
        assert [len(s["holders"]) for s in json.loads(shown.stdout)] == [1]
    probe = cogworker.limiter.concurrent("killable", 1, lease_s=3, wait_timeout=0)

    def acquired() -> bool:
        try:
            probe.acquire()
        except cogworker.OverLimit:
            return False
        return True

    wait_until(acquired, timeout=15, interval=0.05, message="the dead holder's slot")
    assert redis_ms(r) >= lease_end_ms  # given back by its lease, not sooner
    probe.release()


def pass_windows(line: str) -> tuple[int, int]:
    """The first and last 2 s window a run's pass can have been counted in: it happened between the
    two times the job recorded around it (a loaded machine may put a window's edge between them)."""
    _, before, after = line.split()
    return int(float(before) // 2), int(float(after) // 2)


def five_to_a_window(spans: list[tuple[int, int]]) -> Counter[int]:
    """Places each pass in a window of its span, at most five to a window, earliest span end first
    (which places them all whenever any placement can); fails when they can't all be placed."""
    placed: Counter[int] = Counter()
    for first, last in sorted(spans, key=lambda span: (span[1], span[0])):
        window = next((w for w in range(first, last + 1) if placed[w] < 5), None)
        assert window is not None, f"more than five passes in windows {first}..{last}: {sorted(spans)}"
        placed[window] += 1
    return placed


def test_five_to_a_window_places_straddling_passes_and_refuses_a_sixth() -> None:
    assert five_to_a_window([(1, 2)] * 3 + [(2, 2)] * 5) == Counter({1: 3, 2: 5})
    with pytest.raises(AssertionError, match="more than five"):
        five_to_a_window([(1, 1)] * 6)


def test_over_limit_jobs_are_put_back_not_failed_and_all_run(
    workers: WorkerPool, r: redis.Redis, configured: object, redis_server: RedisServer
) -> None:
    for worker in [workers.start(**ENV) for _ in range(2)]:
        worker.identity(timeout=30)
    jids = [limiter_jobs.windowed.perform_async(f"w{i}") for i in range(12)]
    wait_until(lambda: r.llen("test:ran") == 12, timeout=60, message="every windowed job to run")
    assert r.get(keys.STAT_FAILED) is None and r.zcard(keys.RETRY) == 0 and r.zcard(keys.DEAD) == 0
    # Five per 2 s window (on Redis's clock, the machine's here): the passes fit in their windows at
    # most five to a window, and every job past the windows' fives was put back at least once.
    spans = [pass_windows(line) for line in r.lrange("test:ran", 0, -1)]
    windows = five_to_a_window(spans)
    limited = int(r.get(keys.stat("limited")) or 0)
    spanned = max(last for _, last in spans) - min(first for first, _ in spans) + 1
    assert limited >= 12 - 5 * spanned and limited >= 2, (limited, windows)
    # What an operator sees: `cogworker status` counts them, and each job's status ends complete.
    shown = subprocess.run(
        [sys.executable, "-m", "cogworker", "status", "--json"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "COGWORKER_REDIS_URL": redis_server.url},
    )
    assert json.loads(shown.stdout)["ended"]["limited"] == limited
    assert {cogworker.status(jid) for jid in jids} == {"complete"}
    lines = [e for w in workers.workers for e in w.events_named("job_limited")]
    assert len(lines) == limited and {e["limiter"] for e in lines} == {"five-per-2s"}


def test_dynamic_names_limit_per_name_and_their_keys_expire(
    workers: WorkerPool, r: redis.Redis, configured: object
) -> None:
    workers.start(**ENV)
    for i in range(6):
        for account in (1, 2):
            limiter_jobs.per_account.perform_async(account, f"a{account}-{i}")
    wait_until(lambda: r.llen("test:ran") == 12, timeout=60, message="every per-account job to run")
    for account in (1, 2):
        assert max(int(n) for n in r.lrange(f"test:seen:{account}", 0, -1)) == 1
    left = r.keys(keys.LIMITER_PREFIX + "*")
    # Nothing without an expiry (-1); a key may go (-2) between KEYS and PTTL as its last slot comes back.
    assert all(r.pttl(key) != -1 for key in left), left
    assert r.get(keys.STAT_FAILED) is None
