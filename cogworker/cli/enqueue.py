"""`cogworker enqueue NAME [JSON_ARGS] [--kwargs JSON] [--queue Q] [--in SECONDS]`."""

from __future__ import annotations

import argparse
from typing import Any

from cogworker import exitcodes
from cogworker.cli.common import Context, Failure, cwd_first_on_path, timestamp
from cogworker.ops import enqueue as enqueue_ops

DESCRIPTION = """\
Push a job by its registered name (e.g. myapp.jobs.send_email) with JSON arguments: JSON_ARGS is a
JSON array of positional arguments, --kwargs a JSON object. The job is looked up as a worker would
(COGWORKER_REQUIRE first), so its options apply; if its module can't be imported here it is pushed by
name with a warning, and if the module imports but has no such job nothing is pushed.

A Ruby class name (HardWorker, Billing::InvoiceJob) that no Python job here is named is pushed for
Ruby's Sidekiq to run: positional arguments only, and --queue is required."""

EPILOG = """\
examples:
  cogworker enqueue myapp.jobs.send_email '[42, "welcome"]' --in 60
  cogworker enqueue HardWorker '[1, 2]' --queue ruby"""


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "enqueue",
        parents=parents,
        help="push a job by its registered name, or for a Ruby class",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "name", metavar="NAME", help="the job's registered name, or a Ruby class (Foo::BarJob)"
    )
    parser.add_argument("json_args", metavar="JSON_ARGS", nargs="?", help="a JSON array of arguments")
    parser.add_argument("--kwargs", metavar="JSON", help="a JSON object of keyword arguments")
    parser.add_argument("--queue", metavar="Q", help="push to this queue instead of the job's own")
    parser.add_argument(
        "--in", dest="in_s", metavar="SECONDS", type=float, help="run it this many seconds from now"
    )
    parser.set_defaults(handler=enqueue)


def enqueue(ctx: Context) -> int:
    a = ctx.args
    # The job is looked up as a worker would, importing its module: from the current directory too.
    cwd_first_on_path()
    try:
        args = enqueue_ops.parse_json_args(a.json_args)
        kwargs = enqueue_ops.parse_json_kwargs(a.kwargs)
        result = enqueue_ops.enqueue(
            ctx.settings, ctx.client, a.name, args, kwargs, queue=a.queue, in_s=a.in_s
        )
    except enqueue_ops.BadArguments as exc:
        raise Failure(str(exc), exitcodes.USAGE) from None
    for warning in result.warnings:
        ctx.warn(warning)

    def lines(_: Any) -> list[str]:
        if result.jid is None:
            return [f"{result.job} not pushed: a client middleware stopped it (a duplicate unique job?)"]
        when = f", due {timestamp(result.at)}" if result.at is not None else ""
        ruby = " (a Ruby class: Sidekiq runs it)" if result.ruby else ""
        return [f"pushed {result.job}{ruby} to queue {result.queue} as {result.jid}{when}"]

    ctx.emit(result, lines)
    return 0
