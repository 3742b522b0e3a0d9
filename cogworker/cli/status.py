"""`cogworker status`: processes, queues, the retry/scheduled/dead sets, and jobs in progress."""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import Any

import redis

from cogworker.cli.common import Context, short, table
from cogworker.formats import duration, size_bytes
from cogworker.ops import processes as process_ops
from cogworker.ops import queues as queue_ops
from cogworker.ops import sets as set_ops
from cogworker.ops import stats
from cogworker.store import shards, sidekiq_keys


@dataclass(frozen=True, slots=True)
class Status:
    processes: list[process_ops.ProcessInfo]
    orphaned: list[process_ops.OrphanedList]
    queues: list[queue_ops.QueueInfo]
    sets: dict[str, int]
    processed: int
    failed: int
    ended: dict[str, int]  # keys.ENDED_UNRUN outcome -> total


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "status",
        parents=parents,
        help="processes, queues, retry/scheduled/dead sizes, jobs in progress",
        description="Live processes (host, pid, identity, uptime, busy/threads, RSS, quiet) with the jobs "
        "each is running and the length of its in-progress list; in-progress lists left by processes "
        "that are gone; every queue's size and latency (age of the job popped next); the sizes of the "
        "retry, scheduled and dead sets.",
    )
    parser.set_defaults(handler=status)


def collect(ctx: Context) -> Status:
    client = ctx.client
    now = time.time()
    live = process_ops.processes(client, now)
    read = {q for p in live for q in p.queues}
    totals = stats.totals(client)
    return Status(
        processes=live,
        orphaned=process_ops.orphaned_lists(client, {p.identity for p in live}),
        queues=queue_ops.queue_infos(client, queue_ops.known_queues(client, read), now),
        sets=_set_sizes(client),
        processed=totals.processed,
        failed=totals.failed,
        ended={outcome: total for outcome, (total, _today) in totals.ended.items()},
    )


def _set_sizes(client: redis.Redis) -> dict[str, int]:
    """The retry, scheduled and dead sizes; in the sharded layout summed over every partition."""
    if not shards.is_sharded():
        return {name: set_ops.size(client, name) for name in set_ops.SETS}
    return stats.job_set_sizes(client)


def status(ctx: Context) -> int:
    ctx.emit(collect(ctx), status_lines)
    return 0


def status_lines(s: Status) -> list[str]:
    busy = sum(p.busy for p in s.processes)
    threads = sum(p.slots for p in s.processes)
    lines = [
        f"Processes: {len(s.processes)} live, {busy}/{threads} slots busy   "
        f"Processed: {s.processed}   Failed: {s.failed}"
        + "".join(f"   {outcome.capitalize()}: {n}" for outcome, n in s.ended.items()),
    ]
    if s.processes:
        rows = [
            [
                p.hostname,
                p.pid if p.pid is not None else "-",
                p.identity,
                p.tag or "-",
                duration(p.uptime_s),
                f"{p.busy}/{p.capacity}",
                size_bytes(p.rss_bytes),
                "quiet" if p.quiet else "-",
                p.in_progress,
                duration(p.beat_age_s),
            ]
            for p in s.processes
        ]
        headers = ["HOST", "PID", "IDENTITY", "TAG", "UPTIME", "BUSY", "RSS", "QUIET", "IN PROGRESS", "BEAT"]
        if sidekiq_keys.enabled():
            # The Sidekiq mode: Sidekiq's processes are listed too, marked, with the queues each reads.
            headers += ["LANGUAGE", "QUEUES"]
            for row, p in zip(rows, s.processes, strict=True):
                row += [p.language, ",".join(p.queues)]
        lines += ["", *table(headers, rows)]
    running = [(p, r) for p in s.processes for r in p.running]
    if running:
        lines += ["", "Running:"]
        rows = [
            [
                p.identity,
                r.queue,
                r.job or "(unreadable)",
                r.jid or "-",
                duration(r.running_for_s),
                short(r.args, 40),
            ]
            for p, r in running
        ]
        lines += table(["PROCESS", "QUEUE", "JOB", "JID", "FOR", "ARGS"], rows)
    if s.orphaned:
        lines += ["", "In progress on processes that are not live (recovered after the orphan threshold):"]
        rows = [[o.identity, o.size, duration(o.last_beat_age_s)] for o in s.orphaned]
        lines += table(["IDENTITY", "JOBS", "SILENT"], rows)
    lines += ["", "Queues:"]
    if s.queues:
        rows = [[q.name, q.size, duration(q.latency_s), "paused" if q.paused else "-"] for q in s.queues]
        lines += table(["QUEUE", "SIZE", "LATENCY", "PAUSED"], rows)
    else:
        lines.append("(none)")
    lines += ["", "   ".join(f"{name.capitalize()}: {n}" for name, n in s.sets.items())]
    return lines
