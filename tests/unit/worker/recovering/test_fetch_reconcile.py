"""A live worker whose fetch reply was lost (Redis stalled past the command timeout after the fetch
was sent) finds the jobs the fetch moved onto its in-progress list and puts them back on their queue;
a job thread whose job escaped the processor requeues it counting an orphaning.

The stall is `DEBUG SLEEP` on a private server, sent in one write with an LPUSH: Redis runs the LPUSH
right after the sleep, before the fetches the worker sent (and gave up on) meanwhile, so those stale
fetches find jobs to move and their replies go to closed sockets.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import demo_jobs
import pytest
import redis

import cogworker
from cogworker import codec
from cogworker.api import payload
from cogworker.settings import Settings, load_settings
from cogworker.store import job_keys, keys
from cogworker.store.connection import connect
from cogworker.store.redis_context import RedisContext
from cogworker.worker.fetching.fetch import Work
from cogworker.worker.fetching.reliable_fetch import ReliableFetch
from cogworker.worker.manager import Manager
from cogworker.worker.recovering.recovery import Recovery
from cogworker.worker.running.processor import Stats
from cogworker.worker.settling.settle import Settler
from tests.support.redis_server import RedisServer, wait_until
from tests.support.workers import Worker, WorkerPool

# Commands give up after 1 s (a blocking wait after its block time plus 2 s): a stall of 4 s loses
# the replies of both the fetch script and a BLMOVE.
QUICK = {"COGWORKER_REDIS_TIMEOUT_S": "1", "COGWORKER_CONCURRENCY": "2"}
STALL_S = 4


@pytest.fixture
def debug_redis() -> Iterator[RedisServer]:
    server = RedisServer(extra=("--enable-debug-command", "yes"))
    try:
        yield server
    finally:
        server.close()


def raw_job(job: str, args: list[object], queue: str = "default") -> str:
    return codec.dumps(payload.build(job, args, {}, queue=queue, retry=True))


def stall_then_push(server: RedisServer, raws: list[str], queue: str = "default") -> None:
    """Stall Redis for STALL_S seconds, then push `raws` before anything else runs."""
    client = redis.Redis(
        host="127.0.0.1", port=server.port, decode_responses=True, socket_timeout=STALL_S + 10
    )
    try:
        pipe = client.pipeline(transaction=False)
        pipe.execute_command("DEBUG", "SLEEP", STALL_S)
        pipe.lpush(keys.queue(queue), *raws)
        pipe.execute()
    finally:
        client.close()


def identity_of(worker: Worker) -> str:
    ready = wait_until(lambda: worker.events_named("worker_ready"), timeout=15, message="the worker")
    return str(ready[0]["identity"])


def assert_all_ran_once_and_none_stranded(r: redis.Redis, worker: Worker, identity: str, count: int) -> None:
    wait_until(lambda: r.llen("test:ran") >= count, timeout=15, message=f"all {count} jobs to run")
    wait_until(lambda: r.llen(keys.in_progress(identity)) == 0, timeout=10, message="every ack")
    tags = sorted(str(item).split()[0] for item in r.lrange("test:ran", 0, -1))
    assert tags == sorted(f"j{i}" for i in range(count))  # each exactly once
    assert worker.proc.poll() is None
    assert fetch_outage(worker), "the stall should have cost the worker a fetch reply"


@pytest.mark.parametrize(
    "queues",
    ["default", "default,other"],
    ids=["one-queue-blmove", "several-queues-fetch-script"],
)
def test_jobs_moved_by_a_fetch_whose_reply_was_lost_still_run(
    debug_redis: RedisServer, workers: WorkerPool, queues: str
) -> None:
    r = debug_redis.client()
    worker = workers.start(debug_redis.url, COGWORKER_QUEUES=queues, **QUICK)
    identity = identity_of(worker)
    if queues == "default":
        waiting = lambda: any(c.get("cmd") == "blmove" for c in r.client_list())  # noqa: E731
    else:
        waiting = lambda: r.pubsub_numsub(keys.WAKE_CHANNEL) == [(keys.WAKE_CHANNEL, 1)]  # noqa: E731
    wait_until(waiting, timeout=15, message="the worker to wait for work")
    stall_then_push(debug_redis, [raw_job("demo_jobs.record", [f"j{i}"]) for i in range(6)])
    assert_all_ran_once_and_none_stranded(r, worker, identity, 6)
    assert worker.stop() == 0


class Escaped(BaseException):
    """Stands for whatever still escapes the processor on a job thread."""


def test_a_job_whose_thread_fails_is_requeued_counting_orphanings_until_dead(
    redis_server: RedisServer, r: redis.Redis
) -> None:
    """A job thread that fails outside the processor doesn't leave its job stranded in progress on
    a live process: the job goes back to its queue, each time counting an orphaning, and a job
    that keeps doing it ends in dead like any poison pill. The manager runs in this process, with a
    job runner that fails (the seam for a failure no job can cause once the processor catches
    everything), against a real Redis."""
    settings = load_settings(redis_url=redis_server.url, concurrency=1, max_orphanings=2)
    identity = "test:reconcile:0"
    ctx = RedisContext.build(settings)
    fetcher = ReliableFetch(
        ctx.client, connect(settings, extra_timeout_s=2.0), ctx.scripts, identity, settings.queue_spec
    )
    settler = Settler(ctx, fetcher.in_progress_key)
    runs: list[str] = []

    def failing_thread(work: Work) -> None:
        runs.append(work.raw)
        raise Escaped("escaped the processor")

    manager = Manager(ctx, fetcher, settler, Stats(), run_job=failing_thread)
    manager.reconciler.on_buried = Recovery(ctx, identity).complete_burials
    raw = raw_job("demo_jobs.record", ["poison"])
    jid = str(codec.loads_dict(raw)["jid"])  # type: ignore[index]
    r.lpush(keys.queue("default"), raw)
    manager.start()
    try:
        # The reconcile script buries the pill as it was, and the burial is then completed with its
        # error fields (Recovery.complete_burials): wait for the completed entry, not the first one.
        [entry] = wait_until(
            lambda: [e for e in r.zrange(keys.DEAD, 0, -1) if "error_class" in (codec.loads_dict(e) or {})],
            timeout=10,
            message="the job in dead with its error",
        )
    finally:
        manager.stop(time.monotonic() + 2)
    assert r.zcard(keys.DEAD) == 1
    dead = codec.loads_dict(entry)
    assert dead is not None and dead["jid"] == jid and dead["error_class"] == "cogworker.ProcessDied"
    assert runs == [raw] * 3  # the first run and two requeues (max_orphanings=2), then dead
    assert r.llen(keys.queue("default")) == 0
    assert r.llen(fetcher.in_progress_key) == 0
    assert not r.exists(keys.orphanings(jid))


def reliable_fetch(settings: Settings, identity: str = "test:reconcile:1") -> ReliableFetch:
    ctx = RedisContext.build(settings)
    return ReliableFetch(ctx.client, connect(settings), ctx.scripts, identity, settings.queue_spec)


def test_reconcile_puts_back_what_is_not_held_counting_copies(settings: Settings, r: redis.Redis) -> None:
    fetcher = reliable_fetch(settings)
    a, b, c = (raw_job("demo_jobs.record", [tag]) for tag in "abc")
    # Newest at the head, as LMOVE leaves them: c was fetched last. Two copies of a.
    r.rpush(fetcher.in_progress_key, c, a, b, a)
    result = fetcher.reconcile([a, c], [], max_orphanings=3)
    assert (result.requeued, result.kept, result.buried) == (2, 0, [])
    assert sorted(r.lrange(fetcher.in_progress_key, 0, -1)) == sorted([a, c])
    # Put back on the end popped next, the oldest popped first.
    assert r.lrange(keys.queue("default"), 0, -1) == [b, a]
    assert r.rpop(keys.queue("default")) == a


def test_reconcile_routes_by_payload_and_keeps_what_it_cannot_write(
    settings: Settings, r: redis.Redis
) -> None:
    fetcher = reliable_fetch(settings)
    other = raw_job("demo_jobs.on_other", ["x"], queue="other")
    blocked = raw_job("demo_jobs.record", ["y"], queue="broken")
    unreadable = "not json {"
    r.set(keys.queue("broken"), "a string where a queue belongs")
    r.rpush(fetcher.in_progress_key, other, blocked, unreadable)
    result = fetcher.reconcile([], [], max_orphanings=3)
    assert (result.requeued, result.kept) == (2, 1)
    assert result.wrong_type_keys == [keys.queue("broken")]
    assert r.lrange(keys.queue("other"), 0, -1) == [other]
    assert r.lrange(keys.queue("default"), 0, -1) == [unreadable]  # the processor buries it from there
    assert r.lrange(fetcher.in_progress_key, 0, -1) == [blocked]  # kept, never lost
    assert {"other", "default"} <= r.smembers(keys.QUEUES)


def test_reconcile_counts_a_failed_thread_as_an_orphaning_and_buries_past_the_limit(
    settings: Settings, r: redis.Redis
) -> None:
    fetcher = reliable_fetch(settings)
    raw = raw_job("demo_jobs.record", ["pill"])
    jid = str(codec.loads_dict(raw)["jid"])  # type: ignore[index]
    r.rpush(fetcher.in_progress_key, raw)
    assert fetcher.reconcile([], [raw], max_orphanings=1).requeued == 1
    assert r.get(keys.orphanings(jid)) == "1"
    # With a limit of 1 its first orphaning makes it a suspect (worker/recovering/recovery.py's suspect_at).
    r.lmove(keys.suspects("default"), fetcher.in_progress_key, "RIGHT", "LEFT")
    result = fetcher.reconcile([], [raw], max_orphanings=1)
    assert (result.requeued, result.buried) == (0, [raw])
    assert r.zrange(keys.DEAD, 0, -1) == [raw]
    assert r.llen(fetcher.in_progress_key) == 0 and r.llen(keys.queue("default")) == 0
    # A failed thread whose job the process still holds (its ack is pending) changes nothing.
    r.rpush(fetcher.in_progress_key, raw)
    assert fetcher.reconcile([raw], [raw], max_orphanings=1).requeued == 0
    assert r.lrange(fetcher.in_progress_key, 0, -1) == [raw]


def test_every_job_finishes_after_redis_is_stopped_mid_run(tmp_path: Path, workers: WorkerPool) -> None:
    """The issue's reproduction: a busy worker, Redis SIGSTOPped past the command timeout and
    continued. Every job finishes while the worker lives, without waiting for the orphan threshold."""
    server = RedisServer()
    try:
        cogworker.configure(load_settings(redis_url=server.url))
        out = tmp_path / "ran.txt"
        jobs = 300
        demo_jobs.to_file.perform_async(str(out), "first")
        worker = workers.start(server.url, COGWORKER_REDIS_TIMEOUT_S="1", COGWORKER_CONCURRENCY="4")
        wait_until(lambda: out.exists(), timeout=15, message="the worker to run a job")
        cogworker.push_bulk(demo_jobs.to_file, [(str(out), f"j{i}", 0.01) for i in range(jobs)])
        server.pause()
        try:
            # A fetch given up on: Redis runs it when continued, and its reply goes nowhere.
            wait_until(lambda: fetch_outage(worker), timeout=10, message="a fetch to time out")
        finally:
            server.resume()
        wait_until(lambda: len(set(ran(out))) == jobs + 1, timeout=20, message="every job")
        assert worker.proc.poll() is None
        assert sorted(ran(out)) == sorted(["first", *(f"j{i}" for i in range(jobs))])  # each once
        assert worker.stop() == 0
    finally:
        server.close()


def fetch_outage(worker: Worker) -> bool:
    return any(e.get("component") == "Fetch" for e in worker.events_named("redis_outage_started"))


def ran(out: Path) -> list[str]:
    return [line.split()[0] for line in out.read_text().splitlines()] if out.exists() else []


def test_a_fetched_suspect_runs_alone_and_goes_back_to_its_suspects_list(
    settings: Settings, r: redis.Redis
) -> None:
    """The fetcher learns from fetch.lua that it holds a suspect: it blocks on no queue (a BLMOVE
    would take a job beside it), takes nothing more, and gives it back to its suspects list."""
    fetcher = reliable_fetch(settings)
    suspect, other = raw_job("demo_jobs.record", ["suspect"]), raw_job("demo_jobs.record", ["other"])
    r.rpush(keys.suspects("default"), suspect)
    r.rpush(keys.queue("default"), other)
    [work] = fetcher.fetch(4, []).works
    assert (work.raw, work.suspect, work.queue, fetcher.can_block) == (suspect, True, "default", False)
    assert fetcher.fetch(4, []).works == [] and not fetcher.can_block
    assert fetcher.give_back(work) is True
    assert r.lrange(keys.suspects("default"), 0, -1) == [suspect]
    # Nothing left on the list: the suspect is taken again, alone, and once acknowledged the
    # fetcher fetches as before.
    [work] = fetcher.fetch(4, []).works
    jid = str(codec.loads_dict(suspect)["jid"])  # type: ignore[index]
    assert [w.raw for w in fetcher.fetch(4, [(work.raw, jid)]).works] == [other] and fetcher.can_block
    fetcher.close()


def test_acknowledging_a_job_without_a_jid_clears_its_digest_counter(
    settings: Settings, r: redis.Redis
) -> None:
    fetcher = reliable_fetch(settings)
    raw = codec.dumps({"class": "demo_jobs.record", "args": ["no jid"], "queue": "default"})
    counter = keys.orphanings_raw(job_keys.digest(raw))
    r.set(counter, 1)
    r.rpush(fetcher.in_progress_key, raw)
    assert fetcher.fetch(0, [(raw, "")]).acked == 1
    assert r.exists(counter) == 0
    fetcher.close()
