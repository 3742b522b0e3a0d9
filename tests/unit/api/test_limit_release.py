"""A worker's concurrent slots given back off the job thread (api/limit_release.py): carried by the next
acquire, or sent by the background thread once no acquire took them; a failed release is logged."""

from __future__ import annotations

import threading

import redis

import cogworker
from cogworker.api import current_job
from cogworker.api.limit_release import CARRY_WINDOW_S, Releases
from cogworker.settings import Settings
from cogworker.store import keys
from tests.support.redis_server import wait_until


def test_tokens_wait_their_window_then_the_thread_sends_them() -> None:
    sent: list[tuple[str, list[str]]] = []
    done = threading.Event()

    def release(name: str, tokens: list[str]) -> None:
        sent.append((name, tokens))
        done.set()

    releases = Releases(release)
    releases.add("a", "t1")
    releases.add("a", "t2")
    assert releases.take("b") == []
    assert done.wait(5) and sent == [("a", ["t1", "t2"])]
    releases.add("a", "t3")
    assert releases.take("a") == ["t3"]  # an acquire carried it: nothing more to send
    assert not releases.flush(older_than=CARRY_WINDOW_S)


def test_a_failed_release_is_logged_and_dropped() -> None:
    def release(name: str, tokens: list[str]) -> None:
        raise redis.ConnectionError("down")

    releases = Releases(release)
    releases._pending["a"] = [(0.0, "t1")]
    assert releases.flush() is False
    assert releases.take("a") == []


def test_in_a_job_the_next_acquire_carries_the_release(r: redis.Redis, configured: Settings) -> None:
    lim = cogworker.limiter.concurrent("carry", 1, lease_s=30, wait_timeout=0)
    job, token = current_job.begin("jid-2", "default", "app.job")
    try:
        with lim:
            pass
        with lim:  # the slot given back above is freed by this acquire, in the same script
            assert r.zcard(keys.limiter("concurrent", "carry")) == 1
    finally:
        current_job.end(job, token)
    wait_until(lambda: r.zcard(keys.limiter("concurrent", "carry")) == 0, timeout=5, message="the release")
