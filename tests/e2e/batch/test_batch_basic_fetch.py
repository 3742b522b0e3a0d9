"""Batch members on basic fetch (a server without LMOVE: the worker falls back to BRPOP, and a job is
then on no in-progress list): each member's end is still counted, so the batch completes."""

from __future__ import annotations

import batch_jobs as bj

import cogworker
from cogworker.settings import load_settings
from tests.support.batches import ENV, stop_all
from tests.support.redis_server import RedisServer, wait_until
from tests.support.workers import WorkerPool


def test_batch_members_are_counted_on_basic_fetch(workers: WorkerPool) -> None:
    server = RedisServer(extra=("--rename-command", "LMOVE", "", "--rename-command", "BLMOVE", ""))
    try:
        cogworker.configure(load_settings(redis_url=server.url))
        # One queue: its idle wait is a BLMOVE, refused, so the worker is on basic fetch before
        # any member is pushed. (Callbacks go to their own queue, which nothing reads here.)
        worker = workers.start(server.url, **{**ENV, "COGWORKER_QUEUES": "default"})
        wait_until(lambda: worker.events_named("reliable_fetch_unsupported"), timeout=30, message="fallback")
        with cogworker.batch("basic", on_success=bj.on_success, callback_args=("basic",)) as b:
            bj.ok.perform_async("ok-1")
            bj.ok.perform_async("ok-2")

        def counted() -> bool:
            status = cogworker.batch_status(b.bid)
            return status is not None and (status.total, status.pending, status.done) == (2, 0, 2)

        wait_until(counted, timeout=15, message="both members counted")
        status = cogworker.batch_status(b.bid)
        assert status is not None and status.state != "pending"
        stop_all(worker)
    finally:
        server.close()
