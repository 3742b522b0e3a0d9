"""`cogworker queues` and `cogworker queue pause|resume|clear NAME`."""

from __future__ import annotations

import argparse
from typing import Any

from cogworker import codec, exitcodes
from cogworker.cli.common import Context, Failure, table, yes_flag
from cogworker.formats import duration
from cogworker.ops import queues as queue_ops
from cogworker.queue_names import QUEUE_NAME_RULE, is_queue_name


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    listing = sub.add_parser(
        "queues",
        parents=parents,
        help="list queues with size, latency and paused state",
        description="Every known queue (pushed to, or paused): its size, its latency (how long the job "
        "popped next has waited) and whether it is paused.",
    )
    listing.set_defaults(handler=list_queues)

    queue = sub.add_parser(
        "queue",
        help="pause, resume or clear one queue",
        description="Pause a queue (fetchers skip it; jobs wait), resume it, or clear it (delete every "
        "job waiting in it; asks first).",
    )
    actions = queue.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, handler, text in (
        ("pause", pause, "stop every process from fetching from NAME (jobs stay queued)"),
        ("resume", resume, "let processes fetch from NAME again"),
        ("clear", clear, "delete every job waiting in NAME (asks first; --yes to skip)"),
    ):
        parser = actions.add_parser(name, parents=parents, help=text, description=text)
        parser.add_argument("name", metavar="NAME", help="the queue's name")
        if name == "clear":
            yes_flag(parser)
        parser.set_defaults(handler=handler)


def list_queues(ctx: Context) -> int:
    infos = queue_ops.queue_infos(ctx.client)

    def lines(data: list[queue_ops.QueueInfo]) -> list[str]:
        if not data:
            return ["(no queues)"]
        rows = [[q.name, q.size, duration(q.latency_s), "paused" if q.paused else "-"] for q in data]
        return table(["QUEUE", "SIZE", "LATENCY", "PAUSED"], rows)

    ctx.emit(infos, lines)
    return 0


def pause(ctx: Context) -> int:
    name = ctx.args.name
    # The rule every push and COGWORKER_QUEUES follow: no worker reads a queue named otherwise, so
    # pausing one would only leave a name in `cogworker queues` (a typo, "mail " for "mail", paused
    # nothing). resume and clear take any name: they only remove, and must undo what an older
    # version paused or clear a queue another client (Sidekiq) named.
    if not is_queue_name(name):
        raise Failure(
            f"not a queue name: '{codec.escape(name)}' (a queue name is {QUEUE_NAME_RULE})", exitcodes.USAGE
        )
    changed = queue_ops.pause(ctx.client, name)
    text = f"queue {name} paused" if changed else f"queue {name} was already paused"
    ctx.emit({"queue": name, "paused": True, "changed": changed}, lambda _: [text])
    return 0


def resume(ctx: Context) -> int:
    name = ctx.args.name
    changed = queue_ops.resume(ctx.client, name)
    text = f"queue {name} resumed" if changed else f"queue {name} was not paused"
    ctx.emit({"queue": name, "paused": False, "changed": changed}, lambda _: [text])
    return 0


def clear(ctx: Context) -> int:
    name = ctx.args.name
    ctx.confirm(f"Delete all {queue_ops.size(ctx.client, name)} job(s) waiting in queue {name}?")
    removed = queue_ops.clear(ctx.client, name)
    ctx.emit(
        {"queue": name, "removed": removed}, lambda _: [f"queue {name} cleared: {removed} job(s) deleted"]
    )
    return 0
