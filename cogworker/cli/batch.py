"""`cogworker batch show BID` and `cogworker batch list`: what a batch's records say (api/batch.py,
api/batch_status.py), the same data as `cogworker.batch_status(bid)` and the Web UI's batch page.

Exit code 0 when the batch was found, 1 when its records are gone (expired) or never were."""

from __future__ import annotations

import argparse
from typing import Any

from cogworker import exitcodes
from cogworker.api import batch_status as status_api
from cogworker.cli.common import Context, short, table, timestamp


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    group = sub.add_parser(
        "batch",
        help="show a batch (members pending, failures, callbacks), or list recent batches",
        description="Batches (cogworker.batch): `show BID` prints one batch's counts, times, failed "
        "members with their errors and its callbacks' state; `list` the newest batches.",
    )
    actions = group.add_subparsers(dest="action", metavar="ACTION", required=True)
    show_parser = actions.add_parser(
        "show",
        parents=parents,
        help="one batch: counts, times, failures and callbacks",
        description="One batch: total, pending, done, failed and dead members, when it was created and "
        "completed, the failed members (jid and error, the first 1,000) and each callback's state.",
        epilog="exit codes: 0 found, 1 not found (expired, or never created)",
    )
    show_parser.add_argument("bid", metavar="BID", help="the batch's id")
    show_parser.set_defaults(handler=show)
    listing = actions.add_parser(
        "list",
        parents=parents,
        help="the newest batches with their state",
        description="The newest batches (created within COGWORKER_BATCH_TTL_S), newest first.",
    )
    listing.add_argument("--limit", type=int, default=50, help="how many (default 50)")
    listing.set_defaults(handler=list_batches)


def show(ctx: Context) -> int:
    found = status_api.batch_status(ctx.args.bid, ctx.client)
    if found is None:
        ctx.emit({"bid": ctx.args.bid, "found": False}, lambda _: [f"batch {ctx.args.bid}: not found"])
        return exitcodes.FAILURE

    def lines(_: Any) -> list[str]:
        assert found is not None
        out = [
            f"batch {found.bid}: {found.state}"
            + (f" ({_clean(found.description)})" if found.description else ""),
            f"members: {found.total} total, {found.pending} pending, {found.done} done, "
            f"{found.failed} failed ({found.dead} dead)",
            f"created: {timestamp(found.created_at)}   completed: {timestamp(found.completed_at)}",
        ]
        if found.parent:
            out.append(f"parent: {found.parent}")
        if found.holds:
            out.append(f"open: {found.holds} block(s) still pushing to it (nothing decided until they close)")
        if found.callbacks:
            rows = [[c.kind, c.job, c.queue, c.jid, c.state] for c in found.callbacks]
            out += ["", *table(["CALLBACK", "JOB", "QUEUE", "JID", "STATE"], rows)]
        if found.failures:
            out += [
                "",
                *table(
                    ["FAILED MEMBER", "ERROR"], [[m, _clean(short(e, 80))] for m, e in found.failures.items()]
                ),
            ]
        return out

    ctx.emit(found.as_dict(), lines)
    return exitcodes.OK


def list_batches(ctx: Context) -> int:
    found = [
        s
        for bid in status_api.recent(ctx.args.limit, ctx.client)
        if (s := status_api.batch_status(bid, ctx.client))
    ]

    def lines(_: Any) -> list[str]:
        if not found:
            return ["(no batches)"]
        rows = [[s.bid, s.state, f"{s.pending}/{s.total}", str(s.failed), timestamp(s.created_at),
                 _clean(short(s.description, 40))] for s in found]  # fmt: skip
        return table(["BID", "STATE", "PENDING", "FAILED", "CREATED", "DESCRIPTION"], rows)

    ctx.emit([s.as_dict() for s in found], lines)
    return exitcodes.OK


def _clean(text: str) -> str:
    """Control characters (a terminal escape in a description or an error) shown as escapes."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
