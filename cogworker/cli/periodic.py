"""`cogworker periodic list` and `cogworker periodic enqueue NAME`: the entries workers registered,
and a push of one entry's job now (what the Web UI's /periodic page shows and does)."""

from __future__ import annotations

import argparse
from typing import Any

from cogworker.cli.common import Context, short, table, timestamp, to_plain
from cogworker.formats import duration
from cogworker.ops import periodic as periodic_ops
from cogworker.ops import redis_time


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    group = sub.add_parser(
        "periodic",
        help="list periodic entries, or enqueue one's job now",
        description="Periodic entries as the running workers registered them in Redis (cron, time "
        "zone, queue, next and last slot), and `enqueue NAME` to push one entry's job now with its "
        "arguments, outside its schedule.",
    )
    actions = group.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser(
        "list",
        parents=parents,
        help="every registered entry with its next slot",
        description="Every registered entry: its job, cron and time zone, queue, next slot (computed "
        "in its time zone, on Redis's clock) and the last slot handled.",
    )
    listing.set_defaults(handler=list_entries)
    push = actions.add_parser(
        "enqueue",
        parents=parents,
        help="push NAME's job now, with its arguments, to its queue",
        description="Push the entry's job now with its registered arguments to its queue, the way "
        "`cogworker enqueue` does (resolved when the app imports here, else pushed by name with a "
        "warning). No slot is claimed: the next slot runs as planned.",
    )
    push.add_argument("name", metavar="NAME", help="the entry's name (see `cogworker periodic list`)")
    push.set_defaults(handler=enqueue_now)


def list_entries(ctx: Context) -> int:
    now = redis_time(ctx.client)
    found = periodic_ops.entries(ctx.client, now)

    def lines(data: list[periodic_ops.PeriodicEntry]) -> list[str]:
        if not data:
            return ["(no periodic entries registered: they appear once a worker importing them starts)"]
        rows = [
            [
                e.name,
                e.job,
                e.cron,
                e.tz,
                e.queue,
                "-" if e.args is None else short([e.args, e.kwargs] if e.kwargs else e.args, 30),
                "yes" if e.until_executed else "no",
                f"{timestamp(e.next_slot)} (in {duration(e.next_slot - now)})"
                if e.next_slot is not None
                else f"? {e.problem}",
                timestamp(e.last_slot),
            ]
            for e in data
        ]
        return table(["NAME", "JOB", "CRON", "TZ", "QUEUE", "ARGS", "UNTIL_EXECUTED", "NEXT", "LAST"], rows)

    ctx.emit(found, lines)
    return 0


def enqueue_now(ctx: Context) -> int:
    name = ctx.args.name
    result = periodic_ops.enqueue_now(ctx.client, ctx.settings, name)
    for warning in result.warnings:
        ctx.warn(warning)

    def lines(_: Any) -> list[str]:
        if result.jid is None:
            return [
                f"{name}: {result.job} not pushed: a client middleware stopped it (a duplicate unique job?)"
            ]
        return [f"{name}: pushed {result.job} to queue {result.queue} as {result.jid}"]

    ctx.emit({"entry": name, **to_plain(result)}, lines)
    return 0
