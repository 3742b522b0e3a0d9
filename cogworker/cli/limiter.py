"""`cogworker limiter list` and `cogworker limiter show NAME`: the rate limiters in use now, and one's
holders (a concurrent limiter) or usage (a window or bucket)."""

from __future__ import annotations

import argparse
from typing import Any

from cogworker.cli.common import Context, Failure, table
from cogworker.formats import duration
from cogworker.ops import limiters as limiter_ops

DASH = "-"


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    group = sub.add_parser(
        "limiter",
        help="list the rate limiters in use, or show one's holders and usage",
        description="Rate limiters (cogworker.limiter) as Redis holds them. A limiter has keys only while "
        "it is in use (a lease running, a window not yet over, a bucket not yet full again), so an idle "
        "one is not listed.",
    )
    actions = group.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser(
        "list", parents=parents, help="every limiter in use, with its usage and limit"
    )
    listing.set_defaults(handler=list_limiters)
    show = actions.add_parser(
        "show",
        parents=parents,
        help="one limiter: a concurrent one's holders (host, pid, job, lease left), a window's or "
        "bucket's usage",
    )
    show.add_argument("name", metavar="NAME", help="the limiter's name, as given to cogworker.limiter.*")
    show.set_defaults(handler=show_limiter)


def _number(value: float | None) -> str:
    return DASH if value is None else f"{value:g}"


def _usage(s: limiter_ops.LimiterState) -> str:
    if s.kind == "concurrent":
        return f"{s.in_use:g}/{_number(s.limit)} held (leases of {_number(s.per_s)} s)"
    if s.kind == "window":
        return f"{s.in_use:g}/{_number(s.limit)} in this {_number(s.per_s)} s window"
    return f"{s.in_use:.1f}/{_number(s.burst)} tokens taken ({_number(s.limit)} per {_number(s.per_s)} s)"


def _resets(s: limiter_ops.LimiterState) -> str:
    return DASH if s.resets_in_s is None else duration(s.resets_in_s)


def list_limiters(ctx: Context) -> int:
    found = limiter_ops.in_use(ctx.client)

    def lines(data: list[limiter_ops.LimiterState]) -> list[str]:
        if not data:
            return ["(no limiter in use)"]
        return table(
            ["NAME", "KIND", "USAGE", "RESETS IN"], [[s.name, s.kind, _usage(s), _resets(s)] for s in data]
        )

    ctx.emit(found, lines)
    return 0


def show_limiter(ctx: Context) -> int:
    name = ctx.args.name
    found = limiter_ops.show(ctx.client, name)
    if not found:
        raise Failure(f"no limiter named {name!r} is in use (an idle limiter has no keys)")

    def lines(data: list[limiter_ops.LimiterState]) -> list[str]:
        out: list[str] = []
        for s in data:
            out.append(f"{s.name} ({s.kind}): {_usage(s)}; resets in {_resets(s)}")
            if s.holders:
                rows = [[h.host, h.pid, h.jid or DASH, f"{h.lease_left_s:.1f} s"] for h in s.holders]
                out.extend("  " + line for line in table(["HOST", "PID", "JOB", "LEASE LEFT"], rows))
        return out

    ctx.emit(found, lines)
    return 0
