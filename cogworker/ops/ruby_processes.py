"""Sidekiq's own processes, as cogworker's readers of the shared `processes` set see them (the Sidekiq
mode only: COGWORKER_SIDEKIQ_COMPAT).

In the mode the set holds Ruby identities beside cogworker's. A Ruby process has a Sidekiq presence
hash (`<identity>`) and no cogworker presence; cogworker's own processes write both, and label their
Sidekiq one "cogworker" (worker/loops/sidekiq_presence.py), so one of ours that died is not taken for a Ruby
process while its Sidekiq hash outlives it. Nothing of cogworker's prunes or recovers a Ruby member:
Sidekiq's ProcessSet drops it once its hash is gone, as it does for its own.
"""

from __future__ import annotations

from typing import Any

import redis

from cogworker import codec
from cogworker.ops import OpsError
from cogworker.ops.process_records import ProcessInfo, RunningJob, number, presence_fields
from cogworker.store import sidekiq_keys
from cogworker.worker.loops import sidekiq_presence

RUBY = "ruby"
# cogworker's remote commands -> the signal Sidekiq's Process#quiet!/stop! sends (Sidekiq can't resume).
SIGNAL_OF = {"quiet": "TSTP", "stop": "TERM"}


def is_ruby(presence: dict[str, str]) -> bool:
    """A Sidekiq presence hash not written by a cogworker process."""
    info = presence.get("info")
    return bool(info) and not sidekiq_presence.written_by_cogworker(str(info))


def _running_job(thread: str, raw: str, now: float) -> RunningJob:
    """One busy-jobs entry: {queue, payload, run_at}, the payload an object or a JSON string."""
    item = codec.loads_dict(raw) or {}
    payload = item.get("payload")
    job = (codec.loads_dict(payload) or {}) if isinstance(payload, str) else payload
    job = job if isinstance(job, dict) else {}
    run_at = number(item.get("run_at"))
    args = job.get("args")
    name = job.get("wrapped") or job.get("class")  # an ActiveJob shows as its own class, as in Sidekiq
    return RunningJob(
        thread=thread,
        queue=str(item.get("queue") or job.get("queue") or ""),
        jid=str(job["jid"]) if job.get("jid") else None,
        job=str(name) if isinstance(name, str) else None,
        args=args if isinstance(args, list) else [],
        run_at=run_at,
        running_for_s=max(0.0, now - run_at) if run_at is not None else None,
    )


def ruby_process(
    identity: str, presence: dict[str, str], busy_jobs: dict[str, str], now: float, clock: float
) -> ProcessInfo:
    return ProcessInfo(
        **presence_fields(identity, presence, now, clock),
        rss_bytes=int(number(presence.get("rss")) or 0) * 1024,  # Sidekiq writes KB
        quiet=presence.get("quiet") == "true",
        in_progress=0,  # Sidekiq's basic fetch keeps no in-progress list
        running=sorted(
            (_running_job(thread, raw, now) for thread, raw in busy_jobs.items()),
            key=lambda r: (r.run_at or 0.0, r.thread),
        ),
        language=RUBY,
    )


def read_sidekiq(pipe: Any, identity: str) -> None:
    """Queue on `pipe` what `ruby_process` reads of one identity."""
    pipe.hgetall(sidekiq_keys.presence(identity))
    pipe.hgetall(sidekiq_keys.busy_jobs(identity))


def signal(client: redis.Redis | Any, targets: list[ProcessInfo], command: str) -> None:
    """Send Ruby processes the Sidekiq signal for `command`, as Sidekiq's API does (LPUSH, 60 s TTL)."""
    if command not in SIGNAL_OF:
        names = ", ".join(p.identity for p in targets)
        raise OpsError(f"a Sidekiq process can't {command} ({names}): only quiet and stop reach it")
    pipe = client.pipeline(transaction=False)
    for process in targets:
        pipe.lpush(sidekiq_keys.signals(process.identity), SIGNAL_OF[command])
        pipe.expire(sidekiq_keys.signals(process.identity), sidekiq_presence.PRESENCE_TTL_S)
    pipe.execute()
