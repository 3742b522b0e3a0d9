"""The deployment the Web UI benchmark pages through: big sets and queues, live processes, stats.

Everything is written the way cogworker writes it (the same keys, payload fields, and the process
records through heartbeat.lua itself), in batches of a thousand per command and a few hundred
commands per pipeline, so a fill of 100,000 entries per set takes seconds, not minutes.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import redis

from cogworker import codec
from cogworker.store import keys
from cogworker.store.scripts import Scripts
from cogworker.worker.loops.heartbeat import summarize

BATCH = 1_000  # members per ZADD / LPUSH
FLUSH_EVERY = 50  # commands per pipeline round trip
BIG_QUEUE = "bulk-import"
JOBS = ("app.mail.send_welcome", "app.billing.charge_card", "app.media.resize_image", "app.sync.pull_crm")
ERRORS = (
    ("ValueError", "invalid literal for int() with base 10: 'n/a'"),
    ("KeyError", "'customer_id'"),
    ("ConnectionError", "Error 111 connecting to crm.internal:443. Connection refused."),
    ("TimeoutError", "upstream did not answer within 30 s"),
)
ERROR_FILTER = "TimeoutError"  # one entry in four matches it
NO_MATCH_FILTER = "NoSuchErrorAnywhere"  # no entry matches: a filter's worst case
MISSING_JID = "f" * 24  # a jid no fill uses
# A process record outlives the whole run: the benchmark beats once, not every few seconds, and a
# record whose presence TTL ran out would show as gone mid-run (a real process's TTL is seconds).
PRESENCE_TTL_S = 6 * 3600


@dataclass(frozen=True)
class Fill:
    label: str
    set_size: int  # entries in each of dead, retry and scheduled
    big_queue: int  # jobs in the one big queue
    queues: int = 200  # small queues besides it
    jobs_per_queue: int = 50
    processes: int = 50
    running_per_process: int = 4
    periodic: int = 8
    days: int = 180


@dataclass(frozen=True)
class Seeded:
    fill: Fill
    seconds: float
    dead_jid: str  # the entry in the middle of the dead set (by rank)
    dead_key: str  # its entry page's key: "<score>-<jid>", the score as redis-py reads it (repr)
    keys: int
    used_memory_human: str


def _jid(kind: str, i: int) -> str:
    return f"{kind}{i:023x}"


def _job(kind: str, i: int, now: float) -> dict[str, Any]:
    return {
        "class": JOBS[i % len(JOBS)],
        "args": [i, f"user-{i}@example.com", {"plan": "pro", "seats": i % 50}],
        "kwargs": {"trace": f"req-{i:08d}"},
        "jid": _jid(kind, i),
        "queue": f"queue-{i % 200:03d}",
        "created_at": now - 3600 - i,
        "enqueued_at": now - 3600 - i,
        "retry": 25,
    }


def _failed(kind: str, i: int, now: float) -> dict[str, Any]:
    job = _job(kind, i, now)
    error_class, message = ERRORS[i % len(ERRORS)]
    job.update(
        error_class=error_class,
        error_message=f"{message} (attempt {i % 25})",
        failed_at=now - 7200 - i,
        retry_count=i % 25,
        backtrace=[
            'File "/srv/app/jobs.py", line 41, in perform',
            "    result = client.call(payload)",
            'File "/srv/app/client.py", line 118, in call',
            "    raise " + error_class + "(message)",
        ],
    )
    return job


def _scored(fill: Fill, kind: str, now: float) -> Iterator[dict[str, float]]:
    """The set's members in batches: dead scores go back in time (newest first), the others ahead.
    Scores carry fractions, as real ones do (time.time())."""
    for start in range(0, fill.set_size, BATCH):
        batch: dict[str, float] = {}
        for i in range(start, min(start + BATCH, fill.set_size)):
            if kind == "d":
                job = _failed(kind, i, now)
                job["died_at"] = score = now - 1.37 * i - 0.25
            elif kind == "r":
                job = _failed(kind, i, now)
                score = now + 60 + 1.37 * i + 0.25
            else:
                job, score = _job(kind, i, now), now + 60 + 1.37 * i + 0.25
            batch[codec.dumps(job)] = score
        yield batch


class _Batcher:
    def __init__(self, client: redis.Redis) -> None:
        self.pipe = client.pipeline(transaction=False)
        self.queued = 0

    def add(self) -> None:
        self.queued += 1
        if self.queued >= FLUSH_EVERY:
            self.flush()

    def flush(self) -> None:
        if self.queued:
            self.pipe.execute()
            self.queued = 0


def _sets(batcher: _Batcher, fill: Fill, now: float) -> None:
    for kind, key in (("d", keys.DEAD), ("r", keys.RETRY), ("s", keys.SCHEDULE)):
        for batch in _scored(fill, kind, now):
            batcher.pipe.zadd(key, batch)
            batcher.add()


def _queues(batcher: _Batcher, fill: Fill, now: float) -> None:
    sizes = {f"queue-{n:03d}": fill.jobs_per_queue for n in range(fill.queues)} | {BIG_QUEUE: fill.big_queue}
    for name, size in sizes.items():
        for start in range(0, size, BATCH):
            jobs = [
                codec.dumps({**_job("q", i, now), "queue": name})
                for i in range(start, min(start + BATCH, size))
            ]
            batcher.pipe.lpush(keys.queue(name), *jobs)
            batcher.add()
    batcher.pipe.sadd(keys.QUEUES, *sizes)
    batcher.pipe.sadd(keys.PAUSED, "queue-007", "queue-042")
    batcher.add()


def _processes(client: redis.Redis, fill: Fill, now: float) -> None:
    """Each record through heartbeat.lua, as a worker's beat writes it, plus the in-progress list
    of the jobs it runs (reliable fetch)."""
    heartbeat = Scripts(client)
    pipe = client.pipeline(transaction=False)
    for n in range(fill.processes):
        host, pid = f"web-bench-{n // 10}", 4000 + n
        identity = f"{host}:{pid}:{n:08x}"
        queues = [f"queue-{(n + k) % fill.queues:03d}" for k in range(3)] + [BIG_QUEUE]
        info = {
            "hostname": host,
            "pid": pid,
            "identity": identity,
            "queues": queues,
            "weights": [],
            "concurrency": 10,
            "started_at": now - 86_400 + n,
            "version": "bench",
            "tag": f"slot {n % 10}",
        }
        running = [_job("w", n * 100 + k, now) for k in range(fill.running_per_process)]
        work: list[str] = []
        for k, job in enumerate(running):
            item = {"queue": job["queue"], "payload": codec.dumps(job), "run_at": now - 5 * k - 1}
            work += [f"t{140_000 + k}", codec.dumps(summarize(item))]
        args: list[Any] = [identity, PRESENCE_TTL_S, "1", codec.dumps(info), len(running)]
        args += [150_000_000 + n * 1_000_000, "1" if n % 17 == 0 else "0", len(queues), *queues, *work]
        record_keys = [
            keys.process(identity),
            keys.PROCESSES,
            keys.LAST_BEAT,
            keys.IN_PROGRESS_IDENTITIES,
            keys.LIVE_QUEUES,
            keys.work(identity),
            keys.signals(identity),
        ]
        heartbeat.run("heartbeat", record_keys, args, client=pipe)
        pipe.lpush(keys.in_progress(identity), *(codec.dumps(j) for j in running))
    pipe.execute()


def _periodic_and_stats(batcher: _Batcher, fill: Fill, now: float) -> None:
    for n in range(fill.periodic):
        registration = {
            "job": JOBS[n % len(JOBS)],
            "cron": f"{n * 7 % 60} * * * *",
            "tz": "UTC" if n % 2 else "Europe/Paris",
            "queue": f"queue-{n:03d}",
            "until_executed": n % 3 == 0,
            "first_seen": now - 30 * 86_400,
            "last_slot": int(now // 3600 * 3600),
        }
        batcher.pipe.hset(keys.PERIODIC_ENTRIES, f"periodic-{n}", codec.dumps(registration))
        batcher.add()
    today = dt.datetime.fromtimestamp(now, dt.UTC).date()
    counters: dict[str, int] = {keys.STAT_PROCESSED: 0, keys.STAT_FAILED: 0}
    for back in range(fill.days):
        day = (today - dt.timedelta(days=back)).isoformat()
        processed, failed = 40_000 + (back * 7_919) % 20_000, (back * 131) % 900
        counters[keys.stat_processed_day(day)] = processed
        counters[keys.stat_failed_day(day)] = failed
        counters[keys.STAT_PROCESSED] += processed
        counters[keys.STAT_FAILED] += failed
    batcher.pipe.mset(counters)
    batcher.add()


def seed(client: redis.Redis, fill: Fill) -> Seeded:
    """Flush the bench Redis and fill it; returns what the page list needs to name entries."""
    began = time.monotonic()
    client.flushdb()
    now = time.time()
    batcher = _Batcher(client)
    _sets(batcher, fill, now)
    _queues(batcher, fill, now)
    _periodic_and_stats(batcher, fill, now)
    batcher.flush()
    _processes(client, fill, now)
    middle = cast(
        list[tuple[bytes, float]],
        client.zrange(keys.DEAD, fill.set_size // 2, fill.set_size // 2, desc=True, withscores=True),
    )
    raw, score = middle[0]
    jid = str(codec.loads(raw)["jid"])
    return Seeded(
        fill=fill,
        seconds=time.monotonic() - began,
        dead_jid=jid,
        dead_key=f"{float(score)!r}-{jid}",
        keys=int(client.dbsize()),
        used_memory_human=str(client.info("memory")["used_memory_human"]),
    )
