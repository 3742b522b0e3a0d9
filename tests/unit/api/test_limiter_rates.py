"""A window and a bucket hold their rate within 5 % over a minute of load from four processes at once
(two per limiter, each passing it as fast as it lets them, from fresh interpreters configured only
by env). Both limiters run in the same minute, so the test takes one minute, not two."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections import Counter

import pytest
import redis

from cogworker.store import keys
from tests.support.daemon_env import clean_env
from tests.support.redis_server import RedisServer, wait_until

LOAD_S = 60.0
WINDOW_LIMIT, WINDOW_PER_S = 50, 5  # 600 a minute in 12 whole windows
BUCKET_RATE, BUCKET_BURST = 20, 40  # 20 a second after a burst of 40: 1,240 in the minute

CLIENT = """
import os, sys, time
import redis
import cogworker

kind = sys.argv[1]
if kind == "window":
    lim = cogworker.limiter.window("rate-window", {window_limit}, per={window_per})
else:
    lim = cogworker.limiter.bucket("rate-bucket", {rate}, per=1, burst={burst})
r = redis.Redis.from_url(os.environ["COGWORKER_REDIS_URL"])
lim.wait_timeout = 0
try:
    lim.acquire()  # connected, scripts loaded (a window or a bucket holds nothing to give back)
except cogworker.OverLimit:
    pass
r.rpush("test:ready", kind)
while not r.exists("test:minute"):  # the test starts the minute once every client is ready
    time.sleep(0.01)
start, until = (float(x) for x in r.get("test:minute").split())
time.sleep(max(0.0, start - time.time()))
while time.time() < until:
    try:
        lim.wait_timeout = max(0.0, until - time.time())
        with lim:
            seconds, micros = r.time()  # when it passed, on Redis's clock (the limiters' clock)
            if seconds + micros / 1e6 < until:
                r.rpush("test:" + kind, repr(seconds + micros / 1e6))
    except cogworker.OverLimit:
        pass
"""


@pytest.mark.slow
def test_window_and_bucket_hold_their_rate_within_5_percent_over_a_minute(
    r: redis.Redis, redis_server: RedisServer
) -> None:
    code = textwrap.dedent(
        CLIENT.format(
            window_limit=WINDOW_LIMIT, window_per=WINDOW_PER_S, rate=BUCKET_RATE, burst=BUCKET_BURST
        )
    )
    env = clean_env()
    env["COGWORKER_REDIS_URL"] = redis_server.url
    clients = [
        subprocess.Popen([sys.executable, "-c", code, kind], env=env)
        for kind in ("window", "window", "bucket", "bucket")
    ]
    try:
        wait_until(lambda: r.llen("test:ready") == 4, timeout=60, message="every client to be ready")
        # The ready checks took a token or a pass: the minute starts on a fresh window and bucket.
        r.delete(keys.limiter("window", "rate-window"), keys.limiter("bucket", "rate-bucket"))
        start = time.time() + 0.5
        until = start + LOAD_S
        r.set("test:minute", f"{start!r} {until!r}")
        for proc in clients:
            assert proc.wait(timeout=LOAD_S + 60) == 0
    finally:
        for proc in clients:
            proc.kill()
    window_passes = [float(t) for t in r.lrange("test:window", 0, -1)]
    per_window = Counter(int(t // WINDOW_PER_S) for t in window_passes)
    # Whole windows only: the first and last may be cut by the minute's ends.
    whole = [
        n for w, n in per_window.items() if w * WINDOW_PER_S >= start and (w + 1) * WINDOW_PER_S <= until
    ]
    # A pass is stamped just after it passed: one at a window's very end may be stamped in the next.
    assert len(whole) >= 10 and max(per_window.values()) <= 1.05 * WINDOW_LIMIT, per_window
    assert sum(whole) >= 0.95 * WINDOW_LIMIT * len(whole), per_window
    bucket_passes = [float(t) for t in r.lrange("test:bucket", 0, -1)]
    expected = BUCKET_BURST + BUCKET_RATE * LOAD_S
    in_minute = [t for t in bucket_passes if t >= start]
    assert 0.95 * expected <= len(in_minute) <= expected + 1, len(in_minute)
    # After the burst, the steady rate alone (the last 50 s).
    steady = [t for t in in_minute if t >= until - 50]
    assert 0.95 * BUCKET_RATE * 50 <= len(steady) <= 1.05 * BUCKET_RATE * 50, len(steady)
