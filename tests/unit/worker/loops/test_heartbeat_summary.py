"""The work hash holds a bounded summary of each running job, not its payload: a 50 MB job used to be
rewritten to Redis on every beat, and read whole by every `cogworker status`."""

from __future__ import annotations

import demo_jobs
import redis

from cogworker import codec
from cogworker.ops import processes as process_ops
from cogworker.store import keys
from cogworker.worker.loops.heartbeat import SUMMARY_ARGS_CHARS, summarize
from tests.support.redis_server import wait_until

BIG = 5_000_000


def work_entries(r: redis.Redis) -> dict[str, str]:
    found: dict[str, str] = {}
    for key in r.scan_iter(match=keys.WORK_PREFIX + "*"):
        found.update(r.hgetall(key))
    return found


def test_a_running_5mb_job_is_summarised_in_a_few_hundred_bytes(r: redis.Redis, workers, configured) -> None:
    workers.start(COGWORKER_HEARTBEAT_INTERVAL_S="0.2")
    jid = demo_jobs.sleepy.perform_async("x" * BIG, 3)
    wait_until(lambda: r.llen("test:started") == 1, timeout=20, message="the job's start")
    entries = wait_until(lambda: work_entries(r), timeout=10, message="a beat with the running job")

    [raw] = entries.values()
    assert len(raw.encode()) < 2_000
    summary = codec.loads(raw)
    assert summary["jid"] == jid and summary["class"] == "demo_jobs.sleepy"
    assert summary["queue"] == "default" and summary["run_at"] > 0
    [args] = summary["args"]
    assert args.startswith('["xxxx') and args.endswith(f"… (truncated: {BIG + 6} bytes of arguments)")

    [process] = process_ops.processes(r)
    [running] = process.running
    assert (running.jid, running.job, running.queue) == (jid, "demo_jobs.sleepy", "default")
    assert len(running.args[0]) < SUMMARY_ARGS_CHARS + 100


def test_summaries_of_small_unreadable_and_old_entries() -> None:
    small = codec.dumps({"class": "demo_jobs.record", "jid": "j", "queue": "q", "args": ["a", 1]})
    assert summarize({"queue": "q", "payload": small, "run_at": 5.0}) == {
        "queue": "q",
        "run_at": 5.0,
        "jid": "j",
        "class": "demo_jobs.record",
        "args": ["a", 1],
    }
    broken = summarize({"queue": "q", "payload": b"\xff{not json" * 1000, "run_at": 1.0})
    assert broken["jid"] is None and broken["class"] is None and len(broken["unreadable"]) == 100
    # A worker of the previous version wrote the whole payload under "payload": still read.
    old = process_ops._running_job("t1", codec.dumps({"queue": "q", "payload": small, "run_at": 1.0}), 2.0)
    assert (old.jid, old.job, old.args, old.running_for_s) == ("j", "demo_jobs.record", ["a", 1], 1.0)
