"""Awaitable pushes in a real FastAPI app under uvicorn (tests/e2e/aio/lag_app.py), its Redis made
slow by the RESP proxy holding every push's reply back: a loop-lag probe in the app shows that an
`async def` endpoint pushing with `await job.aio.perform_async` leaves the event loop free while the
push waits, where the blocking `perform_async` stalls it for the whole wait. The lifespan closes
the loop's client when the app stops."""

from __future__ import annotations

import json
import signal
import threading
import time
import urllib.request
from typing import Any

import pytest

from cogworker.store import keys
from tests.support.redis_server import RedisServer, wait_until
from tests.support.resp_proxy import RespProxy
from tests.support.web_server import WebServer, asgi_app

pytest.importorskip("fastapi")

HELD_S = 0.6
APP_NAME = "aio-lag-app"


def call(server: WebServer, method: str, path: str) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{server.url}{path}", method=method, data=b"" if method == "POST" else None
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        answer: dict[str, Any] = json.loads(response.read())
    return answer


def worst_lag_during(server: WebServer, path: str) -> tuple[float, str]:
    """Reset the probe, push through `path`, then read the worst lag the probe saw meanwhile."""
    call(server, "POST", "/lag/reset")
    jid = call(server, "POST", path)["jid"]
    return float(call(server, "GET", "/lag")["worst_s"]), str(jid)


def test_an_awaitable_push_leaves_the_loop_free_while_redis_is_slow(
    private_redis: RedisServer, resp_proxy: RespProxy
) -> None:
    direct = private_redis.client()
    url = f"{resp_proxy.url}?client_name={APP_NAME}"
    with asgi_app("tests.e2e.aio.lag_app:create_app", url, ready_path="/lag") as server:
        # Warm both clients up (connection, script load), so only the held reply is measured.
        call(server, "POST", "/aio/0")
        call(server, "POST", "/sync/0")
        resp_proxy.delay_reply(HELD_S, script="push_batch")
        aio_lag, aio_jid = worst_lag_during(server, "/aio/1")
        resp_proxy.delay_reply(HELD_S, script="push_batch")
        sync_lag, sync_jid = worst_lag_during(server, "/sync/2")
        assert len(resp_proxy.faults) == 2  # both pushes were held
        queued = [json.loads(raw)["jid"] for raw in direct.lrange(keys.queue("default"), 0, -1)]
        assert aio_jid in queued and sync_jid in queued
        # The awaitable push: the probe woke on time while the push waited HELD_S for its reply.
        assert aio_lag < HELD_S / 3, f"the loop was blocked {aio_lag:.3f}s during an awaitable push"
        # The blocking push, for contrast: the loop stood still for the whole wait.
        assert sync_lag > HELD_S * 0.8, f"the blocking push held the loop only {sync_lag:.3f}s"
        server.stop()
        assert server.proc.returncode in (0, -signal.SIGTERM)
        assert "Traceback" not in server.tail()

    def app_connections() -> int:
        return sum(1 for c in direct.client_list() if c.get("name") == APP_NAME)

    wait_until(lambda: app_connections() == 0, timeout=10, message="the app's clients closed")
    direct.close()


def test_concurrent_awaitable_pushes_overlap_their_waits(
    private_redis: RedisServer, resp_proxy: RespProxy
) -> None:
    """Ten requests, each push's reply held HELD_S: on one loop they wait together, so all ten are
    answered in about one HELD_S, not ten."""
    direct = private_redis.client()
    with asgi_app("tests.e2e.aio.lag_app:create_app", resp_proxy.url, ready_path="/lag") as server:
        call(server, "POST", "/aio/0")
        resp_proxy.delay_reply(HELD_S, script="push_batch", count=None)
        answers: list[str] = []
        threads = [
            threading.Thread(target=lambda n=n: answers.append(call(server, "POST", f"/aio/{n}")["jid"]))
            for n in range(1, 11)
        ]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        took = time.monotonic() - started
        assert len(answers) == 10 and None not in answers
        assert took < HELD_S * 4, f"ten held pushes took {took:.2f}s: they waited one after another"
        assert direct.llen(keys.queue("default")) == 11
    direct.close()
