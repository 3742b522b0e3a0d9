"""The end of a push: the write to Redis, and after a failed one, what is given back for the jobs known
not to be written (api/push_outcome.py sorts a failure out first).

In the sharded layout the jobs are split over their queues' partitions (api/push_shards.py) and each
partition's are written on its own client: one settled write per partition, in order, the first that
fails stopping the push.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis
import structlog

from cogworker.api import middleware, push_outcome, push_shards, push_write
from cogworker.api.middleware import abandon
from cogworker.settings_fields import SettingsFields
from cogworker.store import replicas, shards
from cogworker.store.shard_clients import ShardClients

_log = structlog.get_logger("cogworker.client")


def write_settled(
    conn: redis.Redis,
    jobs: list[dict[str, Any]],
    undo: middleware.Undo | None,
    *,
    settings: SettingsFields,
    clients: Callable[[], ShardClients],
    abandon_chain: bool = False,
) -> None:
    """Write `jobs`; when that fails, undo what was taken for them (their batch membership and, with
    `abandon_chain`, what the client chain took) only for those known not to be written
    (api/push_outcome.py). Returns when every job is written, its reply lost or not. In the sharded
    layout, each partition's jobs on its own client (api/push_shards.py): `clients()` gives them, made
    on the first push (the job API's, passed in so this module needs nothing of api/client.py)."""
    if shards.is_sharded():
        _write_partitions(clients(), settings, jobs, undo, abandon_chain=abandon_chain)
        return
    _write_group(conn, settings, jobs, undo, abandon_chain=abandon_chain, partition=None)


def _write_group(
    conn: redis.Redis,
    settings: SettingsFields,
    jobs: list[dict[str, Any]],
    undo: middleware.Undo | None,
    *,
    abandon_chain: bool,
    partition: shards.Partition | None,
    home: redis.Redis | None = None,
) -> None:
    """One push_batch.lua write of `jobs` (to `partition`, on its client `conn`), settled."""
    attempt = push_outcome.new_attempt()
    try:
        push_write.write(conn, settings, jobs, attempt, partition, home)
        return
    except replicas.NotReplicated:
        raise  # written: it stands
    except BaseException as exc:
        # Raises PushOutcomeUnknown, undoing nothing, when whether they were written can't be known.
        lost = push_outcome.unwritten(conn, jobs, attempt, exc, partition, home)
        if not lost:
            unconfirmed = replicas.unconfirmed(settings, [str(job["jid"]) for job in jobs])
            if unconfirmed is not None:
                raise unconfirmed from exc
            return
        _give_back(lost, undo, abandon_chain=abandon_chain)
        raise


def _write_partitions(
    clients: ShardClients,
    settings: SettingsFields,
    jobs: list[dict[str, Any]],
    undo: middleware.Undo | None,
    *,
    abandon_chain: bool,
) -> None:
    """The sharded layout's write: the queues recorded on their first push, then one settled write per
    partition, in order; the first that fails stops it (api/push_shards.py says what stands then)."""
    groups = push_shards.split(jobs)
    try:
        push_shards.record(clients.home, push_shards.to_record(jobs))
    except BaseException:
        _give_back(jobs, undo, abandon_chain=abandon_chain)  # nothing was sent
        raise
    for index, (partition, group) in enumerate(groups):
        try:
            _write_group(
                clients.of(partition),
                settings,
                group,
                undo,
                abandon_chain=abandon_chain,
                partition=partition,
                home=clients.home,
            )
        except BaseException as exc:
            later = push_shards.never_sent(groups[index + 1 :])
            if later:
                _give_back(later, undo, abandon_chain=abandon_chain)
            push_shards.note_written(exc, push_shards.never_sent(groups[:index]))
            raise


def _give_back(lost: list[dict[str, Any]], undo: middleware.Undo | None, *, abandon_chain: bool) -> None:
    """What the client chain (with `abandon_chain`) and the before-write hooks took for jobs known
    not to be written."""
    if abandon_chain:
        abandon(lost)
    if undo is not None:
        _undo(undo, lost)


def _undo(undo: middleware.Undo, jobs: list[dict[str, Any]]) -> None:
    """Take back the before-write hooks' work for jobs not written. A failure here is logged, not
    raised over the push's own error: the batch then waits for a member that never runs."""
    try:
        undo(jobs)
    except Exception as exc:
        _log.error(
            "push_undo_failed",
            jids=[str(job["jid"]) for job in jobs][:10],
            error=f"{type(exc).__name__}: {exc}",
        )
