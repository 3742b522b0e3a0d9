"""A batch member cancelled while its process was dying, with real `cogworker run` workers: the
requeue of the dead process's list drops the member (a cancelled job never runs again) and counts it
in its batch as one ended unrun (requeue.lua with batch_lib.lua, in the same step), so the batch
completes: on_complete once, never early, on_success never."""

from __future__ import annotations

import signal

import batch_jobs as bj
import redis

import cogworker
from tests.support.batches import ENV, assert_never_early, runs_of, stop_all
from tests.support.daemon_env import QUICK_RECOVERY
from tests.support.redis_server import wait_until
from tests.support.workers import WorkerPool


def test_a_member_cancelled_while_its_worker_dies_counts_failed_and_completes_the_batch_once(
    r: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    with cogworker.batch("cancelled", on_success=bj.on_success, on_complete=bj.on_complete,
                         on_death=bj.on_death, callback_args=("cancelled",)) as b:  # fmt: skip
        doomed_jid = bj.blocks.perform_async("doomed")
        bj.ok.perform_async("fine")
    doomed = workers.start(**ENV, **QUICK_RECOVERY, COGWORKER_CONCURRENCY="1")
    wait_until(lambda: r.llen("test:started") == 1, timeout=30, message="the member running")
    # Cancelled once its worker lists it as running (the cancel record is written by every call).
    wait_until(lambda: cogworker.cancel(doomed_jid).case == "running", timeout=10, message="cancelled")
    doomed.signal(signal.SIGKILL)  # a sync job sees its cancel only when it asks: it is still running
    doomed.proc.wait(timeout=10)
    rescuer = workers.start(**ENV, **QUICK_RECOVERY)
    wait_until(lambda: runs_of(r, b.bid)["complete"] == 1, timeout=60, message="on_complete ran")
    wait_until(lambda: r.llen("callbacks") == 0 and r.llen("default") == 0, timeout=30, message="drained")
    stop_all(rescuer)
    assert runs_of(r, b.bid) == {"complete": 1}
    status = cogworker.batch_status(b.bid)
    assert status is not None
    counts = (status.total, status.pending, status.done, status.failed, status.dead, status.holds)
    assert counts == (2, 0, 2, 1, 0, 0)
    assert status.failures == {doomed_jid: "ended without running (cancelled)"}
    assert r.llen("test:started") == 1  # the cancelled member never ran again
    assert "fine" in r.smembers(f"test:finished:{b.bid}")
    assert "doomed" not in r.smembers(f"test:finished:{b.bid}")
    assert_never_early(r)
