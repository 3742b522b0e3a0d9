"""`cogworker doctor` in the Sidekiq mode (COGWORKER_SIDEKIQ_COMPAT): which queues Sidekiq's own
processes read, and the check that no queue is read by both languages.

A queue belongs to one language: a Ruby job fetched by a cogworker process fails there (no such job),
a Python job fetched by Sidekiq fails in Ruby (NameError), and each is retried wherever its retry
lands. So a queue that live Ruby and live Python processes both list is a warning.
"""

from __future__ import annotations

from collections.abc import Callable

import redis

from cogworker.ops import processes as process_ops
from cogworker.ops.doctor_check import Check, listed
from cogworker.settings import Settings
from cogworker.store import keys, sidekiq_keys


def _live(client: redis.Redis) -> list[process_ops.ProcessInfo]:
    return process_ops.processes(client) if client.type(keys.PROCESSES) in ("set", "none") else []


def ruby_queues(client: redis.Redis) -> set[str]:
    """The queues live Sidekiq processes read."""
    return {q for p in _live(client) if p.is_ruby for q in p.queues}


def check_queue_languages(client: redis.Redis, settings: Settings) -> Check:
    live = _live(client)
    ruby = {q for p in live if p.is_ruby for q in p.queues}
    python = {q for p in live if not p.is_ruby for q in p.queues}
    both = sorted(ruby & python)
    if both:
        details = [
            f"{name}: Ruby {sum(name in p.queues for p in live if p.is_ruby)}, "
            f"Python {sum(name in p.queues for p in live if not p.is_ruby)} process(es)"
            for name in both
        ]
        return Check(
            "queue languages",
            "WARN",
            f"{len(both)} queue(s) read by both Sidekiq (Ruby) and cogworker (Python) processes: a queue "
            "belongs to one language, and a job fetched by the other one fails there",
            listed(details),
        )
    return Check(
        "queue languages",
        "OK",
        f"{len(ruby)} queue(s) read by Sidekiq, {len(python)} by cogworker, none by both",
    )


def checks() -> list[Callable[[redis.Redis, Settings], Check]]:
    """The mode's checks; none with the mode off."""
    return [check_queue_languages] if sidekiq_keys.enabled() else []
