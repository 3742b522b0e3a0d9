"""`cogworker periodic list`, `enqueue NAME`, `pause NAME` and `resume NAME`: the entries workers
registered with what became of their last slot, a push of one entry's job now, and pausing an entry
on every process (what the Web UI's /periodic page shows and does)."""

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
        help="list periodic entries, enqueue one's job now, pause or resume one",
        description="Periodic entries as the running workers registered them in Redis (cron, time "
        "zone, queue, next slot, and what became of the last one), `enqueue NAME` to push one entry's "
        "job now with its arguments, outside its schedule, and `pause NAME` / `resume NAME`.",
    )
    actions = group.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser(
        "list",
        parents=parents,
        help="every registered entry with its next slot",
        description="Every registered entry: its job, cron and time zone, queue, next slot (computed "
        "in its time zone, on Redis's clock), whether it is paused, and the last slot: enqueued (with "
        "its jid), skipped, missed or paused. --json adds each entry's last runs.",
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
    stop = actions.add_parser(
        "pause",
        parents=parents,
        help="pause NAME on every process: its slots enqueue nothing until resumed",
        description="Pause the entry on every process: from its next slot on, each slot is recorded "
        "as paused and nothing is enqueued, until `resume NAME`. The paused slots are not caught up.",
    )
    stop.add_argument("name", metavar="NAME", help="the entry's name (see `cogworker periodic list`)")
    stop.set_defaults(handler=pause)
    go = actions.add_parser(
        "resume",
        parents=parents,
        help="resume a paused NAME: its next slot runs as planned",
        description="Resume a paused entry: its next slot is enqueued as planned, and the slots it "
        "was paused for are not caught up.",
    )
    go.add_argument("name", metavar="NAME", help="the entry's name")
    go.set_defaults(handler=resume)


def list_entries(ctx: Context) -> int:
    now = redis_time(ctx.client)
    found = periodic_ops.entries(ctx.client, now, settle_s=periodic_ops.settle_s(ctx.settings))

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
                "yes" if e.paused else "no",
                _last(e),
            ]
            for e in data
        ]
        columns = ["NAME", "JOB", "CRON", "TZ", "QUEUE", "ARGS", "UNTIL_EXECUTED", "NEXT", "PAUSED", "LAST"]
        return table(columns, rows)

    ctx.emit(found, lines)
    return 0


def _last(entry: periodic_ops.PeriodicEntry) -> str:
    run = entry.last_run
    if run is None:
        return timestamp(entry.last_slot)
    outcome = f"{run.outcome} x{run.count}{'+' if run.more else ''}" if run.count > 1 else run.outcome
    job = f" {run.jid}" if run.jid else (f" (still running: {run.holder})" if run.holder else "")
    return f"{timestamp(run.slot)} {outcome}{job}"


def pause(ctx: Context) -> int:
    name = ctx.args.name
    changed = periodic_ops.pause(ctx.client, name)
    text = f"{name}: paused; its slots enqueue nothing until `cogworker periodic resume {name}`"
    ctx.emit(
        {"entry": name, "paused": True, "changed": changed},
        lambda _: [text if changed else f"{name}: already paused"],
    )
    return 0


def resume(ctx: Context) -> int:
    name = ctx.args.name
    changed = periodic_ops.resume(ctx.client, name)
    text = f"{name}: resumed; its next slot runs as planned" if changed else f"{name}: was not paused"
    ctx.emit({"entry": name, "paused": False, "changed": changed}, lambda _: [text])
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
