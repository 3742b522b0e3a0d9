"""A batch and rate-limited jobs over TLS as the `app` ACL user: pushed from a fresh interpreter
configured only by environment variables, run by a real `cogworker run`. Their scripts send commands a
plain job never does (the batch's hash and pending set, the limiters' records); the fixtures fail the
test if the ACL with the docs' command list refused any of them (it once lacked HINCRBY, HSETNX,
HMGET, HLEN, HEXISTS and SCARD, so batches and window and bucket limiters failed for that user). Two
jobs share a concurrent limiter's one slot, so its acquire, release and hand-on all run too."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

import cogworker
from cogworker.settings import load_settings
from tests.support.first_call import first_call
from tests.support.redis_server import wait_until
from tests.support.tls_redis import TlsRedis
from tests.support.workers import WorkerPool

pytestmark = pytest.mark.slow

PUSH = """
import cogworker, tls_jobs
out = {out!r}
with cogworker.batch("over tls", on_success=tls_jobs.batch_done, callback_args=(out,)) as b:
    for tag in ("m1", "m2", "m3"):
        tls_jobs.note.perform_async(out, tag)
print(b.bid)
tls_jobs.windowed.perform_async(out, "windowed")
tls_jobs.bucketed.perform_async(out, "bucketed")
tls_jobs.concurrent.perform_async(out, "concurrent1")
tls_jobs.concurrent.perform_async(out, "concurrent2")
"""


def test_a_batch_and_limited_jobs_run_as_the_acl_user(
    tls_redis: TlsRedis, admin: redis.Redis, workers: WorkerPool, tmp_path: Path, tls_env: dict[str, str]
) -> None:
    out = tmp_path / "ran.txt"
    bid = first_call(PUSH.format(out=str(out)), tls_env["COGWORKER_REDIS_URL"], **tls_env)
    worker = workers.start(**tls_env)

    def ran() -> list[str]:
        return [line.split()[0] for line in out.read_text().splitlines()] if out.exists() else []

    wait_until(
        lambda: {"callback", "windowed", "bucketed", "concurrent1", "concurrent2"} <= set(ran()),
        timeout=30,
        message=f"the callback and the limited jobs:\n{worker.log_text()[-2000:]}",
    )
    assert worker.stop() == 0
    batch = [tag for tag in ran() if tag in ("m1", "m2", "m3", "callback")]
    assert sorted(batch[:3]) == ["m1", "m2", "m3"] and batch[3:] == ["callback"]
    assert f"callback {bid}" in out.read_text().splitlines()
    assert sorted(ran()) == [
        "bucketed",
        "callback",
        "concurrent1",
        "concurrent2",
        "m1",
        "m2",
        "m3",
        "windowed",
    ]
    cogworker.configure(load_settings())  # this process's environment is the TLS server's (tls_env)
    status = cogworker.batch_status(bid)
    assert status is not None and (status.total, status.pending, status.done, status.failed) == (3, 0, 3, 0)
