"""The poller's filing of handed-over records in the sharded layout: every partition has its own
`unsettled` list (handover.py pushes a stopping process's filing there, in the job's slot), filed by
file_unsettled.lua into that partition's sets, on that partition's client; the same script and the same
once-only answers as the one-slot layout's (filing.py).

Every partition of every known queue is read (the home registry, the recorded partition counts, this
process's queues), not only this process's queues: the process that stopped may have read others, and
a queue cleared since (its name out of the registry) keeps its recorded partitions. A partition
whose master is down is skipped until it answers (partition_health.py), and the rest are filed.
"""

from __future__ import annotations

from functools import partial

import redis

from cogworker.settings_fields import SettingsFields
from cogworker.store import shards
from cogworker.store.locks import Locks
from cogworker.store.scripts import Scripts
from cogworker.worker.recovering import partitions
from cogworker.worker.settling.filing import Target, Unanswered, file_records
from cogworker.worker.settling.shard_route import ShardRoute, quarantine, unsettled


def target_of(p: shards.Partition) -> Target:
    return Target(
        unsettled(p),
        tuple(shards.job_sets(p).values()),
        shards.dead(p),
        shards.deaths(p),
        partial(shards.orphanings, p),
        partial(quarantine, p),
        p,
    )


def file_every_partition(
    route: ShardRoute, via: tuple[Scripts, SettingsFields, Locks], unanswered: Unanswered
) -> int:
    scripts, settings, locks = via
    home = route.clients.home
    _settle_unanswered(route, locks, unanswered)
    filed = 0
    failure: Exception | None = None
    for p in partitions.known(home, settings.queue_spec.names):
        if route.health.is_down(p):
            continue
        client = route.client(p)
        try:
            filed += file_records((client, scripts, settings, locks), target_of(p), unanswered)
        except redis.ConnectionError as exc:
            route.health.failed(p, exc)
            failure = exc
    if failure is not None:
        raise failure  # reported by the poller (once per outage); the other partitions were filed
    return filed


def _settle_unanswered(route: ShardRoute, locks: Locks, unanswered: Unanswered) -> None:
    """filing._settle_unanswered, asking each set's own partition."""
    while unanswered:
        set_key, text, payload = unanswered[0]
        if route.clients.for_key(set_key).zscore(set_key, text) is not None:
            locks.release_terminal(payload)
        unanswered.pop(0)
