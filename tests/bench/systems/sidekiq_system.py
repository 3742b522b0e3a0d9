"""Sidekiq, the Ruby original, from Debian's `ruby-sidekiq`: two `sidekiq -c 8` processes under
multiproc.py, with and without YJIT.

Sidekiq 6 has no parent process of its own (its forking swarm is Enterprise's), so two copies under
one parent stand for `COGWORKER_COUNT=2`. Its fetch is BRPOP: a job is gone from Redis while it runs,
and a SIGKILLed process loses what it was running (W3 shows it). Jobs are pushed from Python in
Sidekiq's own wire format, as its Client#push writes them: SADD `queues`, LPUSH `queue:<name>` a JSON
payload; the bulk path is one pipeline, as Client#push_bulk's.
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

import redis

from systems.base import THREADS_PER_PROCESS, WORKER_PROCESSES, System

BENCH_DIR = Path(__file__).resolve().parents[1]
MULTIPROC = BENCH_DIR / "multiproc.py"
JOBS = BENCH_DIR / "jobs_sidekiq.rb"
QUEUE = "default"
BULK_CHUNK = 1_000  # payloads per LPUSH in the bulk pipeline


class Sidekiq(System):
    name: ClassVar[str] = "sidekiq"
    bulk_label = "one pipeline: SADD queues + LPUSH (Client#push_bulk's shape)"
    # redis-rb sends INCR as INCR; throughput.own_commands takes the jobs' own reporting out by name.
    done_command = "incr"
    yjit: ClassVar[bool] = False

    def __init__(self, redis_url: str) -> None:
        super().__init__(redis_url)
        sidekiq = shutil.which("sidekiq")
        if sidekiq is None or shutil.which("ruby") is None:
            raise RuntimeError(
                "no `sidekiq` on PATH: install Debian's ruby-sidekiq (tests/bench/run.sh does as root)"
            )
        self._sidekiq = sidekiq
        self._version = self._ask_version()
        self._conn = redis.Redis.from_url(redis_url)

    def _ruby(self) -> list[str]:
        return ["ruby", "--yjit"] if self.yjit else ["ruby"]

    def _ask_version(self) -> str:
        script = (
            'require "sidekiq"; print "Sidekiq #{Sidekiq::VERSION}, Ruby #{RUBY_VERSION}"; '
            'print " + YJIT" if defined?(RubyVM::YJIT) && RubyVM::YJIT.enabled?'
        )
        done = subprocess.run(
            [*self._ruby(), "-e", script], capture_output=True, text=True, timeout=60, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"ruby could not load sidekiq: {done.stderr.strip()[-300:]}")
        if self.yjit and "YJIT" not in done.stdout:
            raise RuntimeError("this Ruby was built without YJIT")
        return done.stdout.strip()

    def worker_argv(
        self,
        processes: int = WORKER_PROCESSES,
        threads: int = THREADS_PER_PROCESS,
        queues: tuple[str, ...] = (QUEUE,),
    ) -> list[str]:
        """`queues`: one `-q` value each, "name" or "name,weight" (with weights, Sidekiq's order is
        weighted; without, strict)."""
        return [
            sys.executable, str(MULTIPROC), str(processes),
            *self._ruby(), self._sidekiq,
            "-r", str(JOBS),
            "-c", str(threads),
            *(arg for queue in queues for arg in ("-q", queue)),
        ]  # fmt: skip

    def many_processes(self, processes: int) -> tuple[list[str], dict[str, str]]:
        return self.worker_argv(processes), {}

    def sized(self, processes: int, threads: int) -> tuple[list[str], dict[str, str]]:
        return self.worker_argv(processes, threads), {}

    def one_process_argv(self, jobs: Path = JOBS) -> list[str]:
        """One `sidekiq` process as its own command, with no multiproc.py (a Python interpreter) in
        front: the start-up curve times Sidekiq's own launch."""
        return [*self._ruby(), self._sidekiq, "-r", str(jobs), "-c", str(THREADS_PER_PROCESS), "-q", QUEUE]

    def worker_env(self) -> dict[str, str]:
        return {"REDIS_URL": self.redis_url}

    def w1_variants(self) -> dict[str, dict[str, str]]:
        # Sidekiq has no affinity setting: each process is started on its own CPU (multiproc.py).
        return {"pinned": {"BENCH_PIN_CPUS": "1"}}

    def version(self) -> str:
        return self._version

    def _payload(self, job_class: str, args: list[Any], queue: str = QUEUE) -> str:
        now = time.time()
        return json.dumps(
            {
                "class": job_class,
                "args": args,
                "retry": True,
                "queue": queue,
                "jid": secrets.token_hex(12),
                "created_at": now,
                "enqueued_at": now,
            },
            separators=(",", ":"),  # compact, as Sidekiq.dump_json (Ruby's JSON.generate) writes it
        )

    def _push(self, job_class: str, args: list[Any]) -> None:
        pipe = self._conn.pipeline(transaction=True)
        pipe.sadd("queues", QUEUE)
        pipe.lpush(f"queue:{QUEUE}", self._payload(job_class, args))
        pipe.execute()

    def push_noop(self) -> None:
        self._push("NoopJob", [])

    def push_noop_bulk(self, count: int, job_class: str = "NoopJob", args: list[Any] | None = None) -> None:
        pipe = self._conn.pipeline(transaction=False)
        pipe.sadd("queues", QUEUE)
        for start in range(0, count, BULK_CHUNK):
            size = min(BULK_CHUNK, count - start)
            pipe.lpush(f"queue:{QUEUE}", *(self._payload(job_class, args or []) for _ in range(size)))
            if args:  # big arguments: a pipeline per chunk, not the whole backlog in one buffer
                pipe.execute()
        pipe.execute()

    def push_io_bulk(self, count: int) -> None:
        self.push_noop_bulk(count, "IoWaitJob")

    def push_paced(self, pushed_at: float, count: int) -> None:
        if count == 1:
            self._push("PacedJob", [pushed_at])
        else:
            self.push_noop_bulk(count, "PacedJob", [pushed_at])

    def push_noop_to(self, queue: str, count: int) -> None:
        """`count` no-op jobs on `queue`, in one pipeline (the queues curve, curves/queues.py)."""
        pipe = self._conn.pipeline(transaction=False)
        pipe.sadd("queues", queue)
        for start in range(0, count, BULK_CHUNK):
            size = min(BULK_CHUNK, count - start)
            pipe.lpush(f"queue:{queue}", *(self._payload("NoopJob", [], queue) for _ in range(size)))
        pipe.execute()

    def push_payload_bulk(self, count: int, data: str) -> None:
        """The payload curve's jobs: `count` jobs whose one argument is `data`."""
        self.push_noop_bulk(count, "PayloadJob", [data])

    # `empty` in make bench (framework_cost.py): jobs with no body, and the list they wait on.
    queue_key = f"queue:{QUEUE}"

    def push_empty_bulk(self, count: int) -> None:
        self.push_noop_bulk(count, "EmptyJob")

    def push_pickup(self, pushed_at: float) -> None:
        self._push("PickupJob", [pushed_at])

    def push_sleeper(self, index: int, seconds: float) -> None:
        self._push("SleeperJob", [index, seconds])

    def close(self) -> None:
        self._conn.close()


class SidekiqYjit(Sidekiq):
    name = "sidekiq-yjit"
    yjit = True
    notes = (
        f"sidekiq, sidekiq-yjit: {WORKER_PROCESSES} `sidekiq -c {THREADS_PER_PROCESS}` processes under "
        "multiproc.py (Sidekiq 6 forks no workers itself), BRPOP fetch (not reliable: a killed process "
        "loses its running jobs), logger at WARN (it logs two lines per job at INFO); sidekiq-yjit "
        "runs the same with `ruby --yjit`, whose "
        "code region (256 MiB by default on Ruby 3.1) is resident in each process: its memory rows.",
    )
